// What a handler says the MCP way or the slog way, as its task's events:
// the notifications/progress and notifications/message it sends
// (captured by the router's sending middleware) and the records of
// Logger's slog handler.

package taskrouter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// captureNotifications is the router's sending middleware: a
// notifications/progress or notifications/message a handler sends with a
// context that belongs to a task also becomes an event of that task (the
// client's request may be long answered), and once it has, failing to
// reach the client (a session gone, the engine's own loopback session) is
// no error of the handler's.
func captureNotifications(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		recorded := false
		switch p := req.GetParams().(type) {
		case *mcp.ProgressNotificationParams:
			if method == notificationProgress && p != nil {
				recorded = Progress(ctx, p.Progress, p.Total, p.Message) == nil
			}
		case *mcp.LoggingMessageParams:
			if method == notificationMessage && p != nil {
				if tg, ok := targetOf(ctx); ok {
					tg.report(mcptask.EventLog, logFromMCP(p, tg.step))
					recorded = true
				}
			}
		}
		res, err := next(ctx, method, req)
		if recorded && err != nil {
			return nil, nil
		}
		return res, err
	}
}

const (
	notificationProgress = "notifications/progress"
	notificationMessage  = "notifications/message"
)

// logFromMCP is the log event of an MCP logging message: its data is the
// line when it is a string, the attributes when it is an object.
func logFromMCP(p *mcp.LoggingMessageParams, step string) mcptask.LogEvent {
	ev := mcptask.LogEvent{Level: mcpLevel(p.Level), Step: step}
	switch d := p.Data.(type) {
	case string:
		ev.Message = clip(d, maxEventText)
	default:
		if raw, err := json.Marshal(d); err == nil {
			if len(raw) > 0 && raw[0] == '{' && len(raw) <= maxEventAttrs {
				ev.Attrs = raw
			} else {
				ev.Message = clip(string(raw), maxEventText)
			}
		}
	}
	if p.Logger != "" {
		ev.Message = p.Logger + ": " + ev.Message
	}
	return ev
}

// mcpLevel maps an MCP logging level (RFC 5424's) to log/slog's four.
func mcpLevel(l mcp.LoggingLevel) string {
	switch l {
	case "debug":
		return "debug"
	case "info", "notice":
		return "info"
	case "warning":
		return "warn"
	}
	return "error"
}

// eventHandler is the slog.Handler of Logger: each record becomes a log
// event of the task.
type eventHandler struct {
	tg eventTarget
	// late, when set, is where tg comes from: a pending run's task, made
	// real at the first record (Logger).
	late   *lateTarget
	groups []string      // the open groups (WithGroup)
	attrs  []groupedAttr // attributes from WithAttrs, with their groups
}

type groupedAttr struct {
	groups []string
	attr   slog.Attr
}

func (h *eventHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *eventHandler) Handle(_ context.Context, rec slog.Record) error {
	tg := h.tg
	if h.late != nil {
		var ok bool
		if tg, ok = h.late.target(); !ok {
			return nil // the task will never exist: as outside a task
		}
	}
	attrs := map[string]any{}
	for _, ga := range h.attrs {
		putAttr(attrs, ga.groups, ga.attr)
	}
	rec.Attrs(func(a slog.Attr) bool {
		putAttr(attrs, h.groups, a)
		return true
	})
	ev := mcptask.LogEvent{Level: slogLevel(rec.Level), Message: clip(rec.Message, maxEventText), Step: tg.step}
	if len(attrs) > 0 {
		raw, err := json.Marshal(attrs)
		if err != nil || len(raw) > maxEventAttrs {
			raw, _ = json.Marshal(map[string]string{"attrs": "left out: " + attrsProblem(err, len(raw))})
		}
		ev.Attrs = raw
	}
	tg.report(mcptask.EventLog, ev)
	return nil
}

func attrsProblem(err error, n int) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d bytes, more than %d", n, maxEventAttrs)
}

func (h *eventHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]groupedAttr(nil), h.attrs...)
	for _, a := range as {
		c.attrs = append(c.attrs, groupedAttr{groups: h.groups, attr: a})
	}
	return &c
}

func (h *eventHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.groups = append(append([]string(nil), h.groups...), name)
	return &c
}

// putAttr sets a into m under the nested groups.
func putAttr(m map[string]any, groups []string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	for _, g := range groups {
		sub, ok := m[g].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[g] = sub
		}
		m = sub
	}
	if a.Value.Kind() == slog.KindGroup {
		inner := a.Value.Group()
		if a.Key == "" { // an empty group key inlines its attributes
			for _, ia := range inner {
				putAttr(m, nil, ia)
			}
			return
		}
		for _, ia := range inner {
			putAttr(m, []string{a.Key}, ia)
		}
		return
	}
	m[a.Key] = attrValue(a.Value)
}

// attrValue is the JSON value of a resolved slog value.
func attrValue(v slog.Value) any {
	switch v.Kind() {
	case slog.KindTime:
		return v.Time().UTC().Format(time.RFC3339Nano)
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return x.Error()
		case json.Marshaler:
			return x
		case fmt.Stringer:
			return x.String()
		}
		if _, err := json.Marshal(v.Any()); err != nil {
			return fmt.Sprint(v.Any())
		}
		return v.Any()
	}
	return v.Any()
}

// slogLevel names a level as mcptask.LogEvent does: the nearest of
// log/slog's four at or below it, lower case.
func slogLevel(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warn"
	case l >= slog.LevelInfo:
		return "info"
	}
	return strings.ToLower(slog.LevelDebug.String())
}
