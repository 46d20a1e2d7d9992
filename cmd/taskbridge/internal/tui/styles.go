package tui

import (
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
)

// styles are the looks of the UI. Meaning never depends on colour alone:
// every state also has a symbol or a word, and selection is shown with a
// marker and reverse video, so the UI reads the same with NO_COLOR.
type styles struct {
	title, tabOn, tabOff, selected, faint, bold lipgloss.Style
	ok, bad, warn, busy, placeholder, errText   lipgloss.Style
}

func newStyles(noColor bool) styles {
	s := lipgloss.NewStyle
	st := styles{
		title:       s().Bold(true),
		tabOn:       s().Bold(true).Reverse(true),
		tabOff:      s(),
		selected:    s().Reverse(true),
		faint:       s().Faint(true),
		bold:        s().Bold(true),
		ok:          s(),
		bad:         s().Bold(true),
		warn:        s().Bold(true),
		busy:        s(),
		placeholder: s().Bold(true).Underline(true),
		errText:     s().Bold(true),
	}
	if noColor {
		return st
	}
	st.title = st.title.Foreground(lipgloss.Color("12"))
	st.ok = st.ok.Foreground(lipgloss.Color("2"))
	st.bad = st.bad.Foreground(lipgloss.Color("1"))
	st.warn = st.warn.Foreground(lipgloss.Color("3"))
	st.busy = st.busy.Foreground(lipgloss.Color("6"))
	st.placeholder = st.placeholder.Foreground(lipgloss.Color("3"))
	st.errText = st.errText.Foreground(lipgloss.Color("1"))
	return st
}

// statusMark is the symbol of a task status.
func statusMark(s mcptask.Status) string {
	switch s {
	case mcptask.StatusWorking:
		return "●"
	case mcptask.StatusInputRequired:
		return "◆"
	case mcptask.StatusCompleted:
		return "✓"
	case mcptask.StatusFailed:
		return "✗"
	case mcptask.StatusCancelled:
		return "⊘"
	}
	return "?"
}

// statusStyle colours a task status.
func (st styles) status(s mcptask.Status) lipgloss.Style {
	switch s {
	case mcptask.StatusWorking:
		return st.busy
	case mcptask.StatusInputRequired:
		return st.warn
	case mcptask.StatusCompleted:
		return st.ok
	case mcptask.StatusFailed, mcptask.StatusCancelled:
		return st.bad
	}
	return st.faint
}

// fit truncates s to width cells (ANSI-aware) and pads it with spaces.
func fit(s string, width int) string {
	if width <= 0 {
		return ""
	}
	s = ansi.Truncate(s, width, "…")
	if w := ansi.StringWidth(s); w < width {
		s += strings.Repeat(" ", width-w)
	}
	return s
}

// clip truncates s to width cells without padding.
func clip(s string, width int) string {
	if width <= 0 {
		return ""
	}
	return ansi.Truncate(s, width, "…")
}

// oneLine collapses whitespace (newlines included) to single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// short abbreviates a task id for tables.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// ago formats a duration compactly: 4s, 3m, 2h, 5d.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// wrap breaks text into lines of at most width cells.
func wrap(text string, width int) []string {
	if width <= 0 {
		return nil
	}
	var out []string
	for _, para := range strings.Split(text, "\n") {
		out = append(out, strings.Split(ansi.Wrap(para, width, ""), "\n")...)
	}
	return out
}
