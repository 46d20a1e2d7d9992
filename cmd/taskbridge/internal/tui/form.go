package tui

import (
	"encoding/json"
	"fmt"
	"strings"

	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/argschema"
	"github.com/taskbridge/taskbridge/handoff"
)

// A form asks for the arguments of a tool call, a prompt, a workflow step
// or an elicitation, one text input per schema field. Answers are checked
// against the schema (argschema) when the cursor leaves a field and on
// submit; a refused answer keeps the form open with the reason under the
// field.
type form struct {
	title  string
	intro  []string // description, guidance, the error of a handed-over step
	fields []*formField
	focus  int
	err    string // a problem with the whole form
	// submit receives the checked values; cancel runs on esc (optional).
	submit func(values map[string]any) tea.Cmd
	cancel func() tea.Cmd
	// cancelHint names what esc does ("cancel", "close").
	cancelHint string
	// alt is a further key that closes the form (an input request's
	// decline), or nil.
	alt *formKey
}

// formKey is a key that closes a form with an action of its own.
type formKey struct {
	key, hint string
	do        func() tea.Cmd
}

// formField is one input of a form.
type formField struct {
	field argschema.Field
	input textinput.Model
	// placeholder marks a value the workflow still needs (highlighted).
	placeholder bool
	// orig is the prefilled value, sent unchanged (as JSON) when the text
	// still reads origText; readOnly fields (multi-line values) are
	// always sent as orig.
	orig     json.RawMessage
	origText string
	readOnly bool
	err      string
}

// formSpec describes a form to build.
type formSpec struct {
	title  string
	intro  []string
	fields []argschema.Field
	// prefill holds values to start from (resolved workflow arguments);
	// a placeholder value ("<description>") marks a field to highlight.
	prefill    map[string]json.RawMessage
	submit     func(map[string]any) tea.Cmd
	cancel     func() tea.Cmd
	cancelHint string
	alt        *formKey
}

func newForm(spec formSpec) *form {
	f := &form{title: spec.title, intro: spec.intro, submit: spec.submit, cancel: spec.cancel, cancelHint: spec.cancelHint, alt: spec.alt}
	if f.cancelHint == "" {
		f.cancelHint = "cancel"
	}
	fields := append([]argschema.Field(nil), spec.fields...)
	for name := range spec.prefill {
		if _, ok := argschema.Lookup(fields, name); !ok {
			fields = append(fields, argschema.Field{Name: name})
		}
	}
	for _, fd := range fields {
		ff := &formField{field: fd, input: textinput.New()}
		ff.input.Prompt = ""
		st := ff.input.Styles()
		st.Cursor.Blink = false
		ff.input.SetStyles(st)
		if raw, ok := spec.prefill[fd.Name]; ok {
			if handoff.IsPlaceholder(raw) {
				ff.placeholder = true
				ff.field.Required = true // the workflow needs a value
				ff.input.Placeholder = argschema.Format(raw)
			} else {
				ff.orig = raw
				text := argschema.Format(raw)
				if strings.ContainsAny(text, "\n\r") {
					ff.readOnly = true
					ff.origText = text
				} else {
					ff.input.SetValue(text)
					ff.origText = ff.input.Value()
				}
			}
		} else if fd.Default != nil {
			ff.input.SetValue(argschema.Format(fd.Default))
		}
		if ff.input.Placeholder == "" && fd.Description != "" {
			ff.input.Placeholder = fd.Description
		}
		f.fields = append(f.fields, ff)
	}
	f.focus = -1
	f.move(1)
	return f
}

// editable reports whether the form has a field the cursor can enter.
func (f *form) editable() bool {
	for _, ff := range f.fields {
		if !ff.readOnly {
			return true
		}
	}
	return false
}

// move focuses the next (dir 1) or previous (dir -1) editable field,
// checking the one it leaves.
func (f *form) move(dir int) {
	if f.focus >= 0 && f.focus < len(f.fields) {
		cur := f.fields[f.focus]
		cur.input.Blur()
		f.check(cur)
	}
	if !f.editable() {
		f.focus = -1
		return
	}
	n := len(f.fields)
	i := f.focus
	for range n {
		i = ((i+dir)%n + n) % n
		if !f.fields[i].readOnly {
			break
		}
	}
	f.focus = i
	f.fields[i].input.Focus()
}

// focusOn focuses field i.
func (f *form) focusOn(i int) {
	if f.focus >= 0 && f.focus < len(f.fields) {
		f.fields[f.focus].input.Blur()
	}
	f.focus = i
	f.fields[i].input.Focus()
}

// lastEditable reports whether the focused field is the last editable one.
func (f *form) lastEditable() bool {
	for i := len(f.fields) - 1; i >= 0; i-- {
		if !f.fields[i].readOnly {
			return i == f.focus
		}
	}
	return true
}

// value returns a field's value: set is false for an optional field left
// empty.
func (ff *formField) value() (v any, set bool, err error) {
	if ff.readOnly || (ff.orig != nil && ff.input.Value() == ff.origText) {
		return ff.orig, true, nil
	}
	return ff.field.Parse(ff.input.Value())
}

// check validates one field and records its error.
func (f *form) check(ff *formField) bool {
	_, _, err := ff.value()
	ff.err = ""
	if err != nil {
		ff.err = err.Error()
		return false
	}
	return true
}

// values checks every field and returns the values, or focuses the first
// refused field.
func (f *form) values() (map[string]any, bool) {
	out := map[string]any{}
	first := -1
	for i, ff := range f.fields {
		if !f.check(ff) {
			if first < 0 {
				first = i
			}
			continue
		}
		if v, set, _ := ff.value(); set {
			out[ff.field.Name] = v
		}
	}
	if first >= 0 {
		f.err = "fix the marked field(s) first"
		f.focusOn(first)
		return nil, false
	}
	f.err = ""
	return out, true
}

// update handles a key; closed reports that the form is done (submitted
// or cancelled).
func (f *form) update(msg tea.KeyPressMsg) (closed bool, cmd tea.Cmd) {
	if f.alt != nil && msg.String() == f.alt.key {
		return true, f.alt.do()
	}
	switch msg.String() {
	case "esc":
		if f.cancel != nil {
			cmd = f.cancel()
		}
		return true, cmd
	case "tab", "down":
		f.move(1)
		return false, nil
	case "shift+tab", "up":
		f.move(-1)
		return false, nil
	case "ctrl+s":
		return f.trySubmit()
	case "enter":
		if f.focus < 0 || f.lastEditable() {
			return f.trySubmit()
		}
		f.move(1)
		return false, nil
	}
	if f.focus >= 0 {
		ff := f.fields[f.focus]
		ff.input, cmd = ff.input.Update(msg)
		if ff.err != "" {
			f.check(ff) // clear the mark as soon as the answer fits
		}
	}
	return false, cmd
}

// forward passes a non-key message (cursor, paste) to the focused input.
func (f *form) forward(msg tea.Msg) tea.Cmd {
	if f.focus < 0 {
		return nil
	}
	var cmd tea.Cmd
	f.fields[f.focus].input, cmd = f.fields[f.focus].input.Update(msg)
	return cmd
}

func (f *form) trySubmit() (bool, tea.Cmd) {
	if f.focus >= 0 {
		f.check(f.fields[f.focus])
	}
	vals, ok := f.values()
	if !ok {
		return false, nil
	}
	if f.submit == nil {
		return true, nil
	}
	return true, f.submit(vals)
}

// view renders the form in width×height cells.
func (f *form) view(st styles, width, height int) []string {
	lines := []string{st.title.Render(clip(f.title, width))}
	for _, l := range f.intro {
		lines = append(lines, wrap(l, width)...)
	}
	lines = append(lines, "")
	labelW := 6
	for _, ff := range f.fields {
		labelW = max(labelW, len([]rune(ff.field.Name))+3) // "◆name* "
	}
	labelW = min(labelW, 20)
	hintW := min(24, max(8, width/3))
	inputW := max(8, width-2-labelW-1-hintW)
	var body []string
	focusLine := 0
	for i, ff := range f.fields {
		marker := "  "
		if i == f.focus {
			marker = "› "
			focusLine = len(body)
		}
		name := ff.field.Name
		if ff.field.Required {
			name += "*"
		}
		label := fit(name, labelW-1) + " "
		if ff.placeholder {
			label = st.placeholder.Render(fit("◆"+name, labelW-1)) + " "
		}
		var input string
		switch {
		case ff.readOnly:
			input = st.faint.Render(fit("(kept) "+oneLine(ff.origText), inputW))
		default:
			ff.input.SetWidth(inputW - 1)
			input = fit(ff.input.View(), inputW)
			if i != f.focus && ff.input.Value() == "" && ff.input.Placeholder != "" {
				input = st.faint.Render(fit(ff.input.Placeholder, inputW))
			}
		}
		hint := st.faint.Render(clip(ff.field.Hint(), hintW))
		body = append(body, marker+label+input+" "+hint)
		if ff.err != "" {
			body = append(body, strings.Repeat(" ", 2+labelW)+st.errText.Render(clip("✗ "+strings.TrimPrefix(ff.err, ff.field.Name+": "), width-2-labelW)))
		}
	}
	if len(f.fields) == 0 {
		body = append(body, st.faint.Render("  (no arguments)"))
	}
	footer := []string{""}
	if f.err != "" {
		footer = append(footer, st.errText.Render(clip("✗ "+f.err, width)))
	}
	keys := "enter next/submit · ctrl+s submit · tab/↑↓ move · esc " + f.cancelHint
	if f.focus < 0 {
		keys = "enter submit · esc " + f.cancelHint
	}
	if f.alt != nil {
		keys += " · " + f.alt.key + " " + f.alt.hint
	}
	footer = append(footer, st.faint.Render(clip(keys, width)))
	room := height - len(lines) - len(footer)
	if room < 1 {
		room = 1
	}
	if len(body) > room {
		start := min(max(0, focusLine-room/2), len(body)-room)
		body = body[start : start+room]
	}
	lines = append(lines, body...)
	if len(lines)+len(footer) > height {
		lines = lines[:max(0, height-len(footer))]
	}
	return append(lines, footer...)
}

// placeholderNames lists the highlighted fields (for tests and messages).
func (f *form) placeholderNames() []string {
	var out []string
	for _, ff := range f.fields {
		if ff.placeholder {
			out = append(out, ff.field.Name)
		}
	}
	return out
}

// describeFields summarises a schema's fields in one line:
// "topic* (text), seconds (number)".
func describeFields(fields []argschema.Field) string {
	if len(fields) == 0 {
		return "no arguments"
	}
	parts := make([]string, len(fields))
	for i, f := range fields {
		name := f.Name
		if f.Required {
			name += "*"
		}
		typ := f.Type
		if len(f.Enum) > 0 {
			typ = "enum"
		}
		if typ == "" {
			typ = "any"
		}
		parts[i] = fmt.Sprintf("%s (%s)", name, typ)
	}
	return strings.Join(parts, ", ")
}
