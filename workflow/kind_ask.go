package workflow

import (
	"encoding/json"
	"fmt"

	"github.com/taskbridge/taskbridge/mcptask"
)

// A question asks a person through the client: when its turn comes, the
// server sends the client elicitation/create, a form whose fields are the
// step's JSON Schema and whose message is the step's text with the values
// it binds filled in ({{name}}), and the person's answer (the form's
// content) is the step's output. It reaches the client as a sampling step
// does (see kind_sample.go): a task-augmented request to a core-dialect
// client that declared tasks.requests.elicitation.create, a plain one to
// a client that declared elicitation, an input request of the workflow
// task to a client of the tasks extension, and otherwise the handoff,
// which tells the model to ask the user and deliver the answer with the
// event tool. A person who declines or cancels the form fails the step:
// its failure policy applies (HandToClient, the default: the model is
// told to ask the user; FailsWorkflow: the workflow fails).

// ask is the kind of Ask steps.
type ask struct {
	askKind
	schema any
}

// Ask returns a question for a person: message (with {{name}} replaced
// by the value Bind("name", source) binds) and a form of the fields
// schema describes (an object JSON Schema of flat fields, as elicitation
// forms are), sent to the client as elicitation/create; the content the
// person accepts is the step's output. A question is not retried by
// default (a person who declined declined): WithRetry changes that.
func Ask(name, message string, schema any) *Step {
	k := &ask{schema: schema}
	k.askKind = newAskKind(k, mcptask.MethodElicit, message)
	k.retryable = false
	return newStep(name, k)
}

func (k *ask) name() mcptask.StepKind { return mcptask.StepKindQuestion }

func (k *ask) print() any {
	return printed{Args: k.printArgs(), Extra: map[string]any{"method": k.method, "text": k.text, "schema": k.schema}}
}

func (k *ask) check(c *checker) {
	k.checkAsk(c)
	if k.schema == nil {
		c.add("it has no form: give Ask an object JSON Schema of the fields to fill in")
		return
	}
	if err := checkObjectSchema(k.schema); err != nil {
		c.add("its form's schema %v", err)
		return
	}
	var sch struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(marshal(k.schema), &sch)
	for name, p := range sch.Properties {
		switch jsonType(p.Type) {
		case "string", "number", "integer", "boolean":
		default:
			c.add("field %q of its form is of type %q: an elicitation form has only string, number, integer and boolean fields", name, jsonType(p.Type))
		}
	}
}

// params are the elicitation request's params for the filled-in message.
func (k *ask) params(text string) map[string]any {
	return map[string]any{"mode": "form", "message": text, "requestedSchema": k.schema}
}

// result reads an elicitation result: the content accepted, or a decline.
func (k *ask) result(raw json.RawMessage) (json.RawMessage, string, error) {
	var res struct {
		Action  string          `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, "", fmt.Errorf("it is not an elicitation result: %v", err)
	}
	switch res.Action {
	case "accept":
		var v map[string]any
		if err := json.Unmarshal(res.Content, &v); err != nil || v == nil {
			return nil, "", fmt.Errorf("its content is not an object")
		}
		if err := matchSchema(k.schema, v); err != nil {
			return nil, "", fmt.Errorf("its content does not match the form: %v", err)
		}
		return marshal(v), "", nil
	case "decline", "cancel":
		return nil, fmt.Sprintf("the person declined the form in the client (answered %q)", res.Action), nil
	}
	return nil, "", fmt.Errorf("action %q is none of accept, decline, cancel", res.Action)
}

func (k *ask) payload() any { return k.schema }

func (k *ask) words() askWords {
	return askWords{what: "a question", who: "the user", capability: "elicitation", cannot: "your client cannot show them a form"}
}

// doText: the model asks the user (Call.Person).
func (k *ask) doText(text, why string) string {
	if why != "" {
		why = "; " + why
	}
	return fmt.Sprintf("waits for a person's answer to this question: %s%s", quotePrompt(text), why)
}

func (k *ask) person() bool { return true }
