package taskrouter

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// The webhook methods (mcptask.MethodWebhooks*): taskbridge's own, in
// both dialects, behind the gate of the tasks/* methods (an extension-
// dialect request must declare the tasks extension; a requestor that
// cannot be identified is refused) and the owner rules of the Go API
// they call (Router.Webhooks: Register, List, Delete, Deliveries).

// RegisterWebhookParams are the params of io.taskbridge/webhooks/register.
type RegisterWebhookParams struct {
	mcp.ParamsBase
	URL    string                 `json:"url"`
	Events []mcptask.WebhookEvent `json:"events,omitempty"`
	TaskID string                 `json:"taskId,omitempty"`
	Owner  string                 `json:"owner,omitempty"`
	Secret string                 `json:"secret,omitempty"`
}

// WebhookParams are the params of io.taskbridge/webhooks/list (TaskID),
// /delete (WebhookID) and /deliveries (WebhookID, Cursor).
type WebhookParams struct {
	mcp.ParamsBase
	WebhookID string `json:"webhookId,omitempty"`
	TaskID    string `json:"taskId,omitempty"`
	Cursor    string `json:"cursor,omitempty"`
}

type registerWebhookResult struct {
	mcp.ResultBase
	ResultType string          `json:"resultType"`
	Webhook    mcptask.Webhook `json:"webhook"`
	Secret     string          `json:"secret"`
}

type listWebhooksResult struct {
	mcp.ResultBase
	ResultType string            `json:"resultType"`
	Webhooks   []mcptask.Webhook `json:"webhooks"`
}

type deliveriesResult struct {
	mcp.ResultBase
	ResultType string                    `json:"resultType"`
	Deliveries []mcptask.WebhookDelivery `json:"deliveries"`
	NextCursor string                    `json:"nextCursor,omitempty"`
}

// install adds the webhook methods to s.
func (w *webhooks) install(s *mcp.Server) error {
	if w.opts.Disabled {
		return nil
	}
	if err := mcp.AddReceivingCustomMethod(s, mcptask.MethodWebhooksRegister, w.registerMethod); err != nil {
		return err
	}
	for _, m := range []struct {
		name string
		h    func(context.Context, *mcp.ServerSession, *WebhookParams) (mcp.Result, error)
	}{
		{mcptask.MethodWebhooksList, w.listMethod},
		{mcptask.MethodWebhooksDelete, w.deleteMethod},
		{mcptask.MethodWebhooksDeliveries, w.deliveriesMethod},
	} {
		if err := mcp.AddReceivingCustomMethod(s, m.name, m.h); err != nil {
			return err
		}
	}
	return nil
}

// normalizeWebhookParams gives a webhook request sent without params an
// empty params value (see normalizeParams).
func normalizeWebhookParams(req mcp.Request) {
	switch r := req.(type) {
	case *mcp.ServerRequest[*RegisterWebhookParams]:
		if r.Params == nil {
			r.Params = &RegisterWebhookParams{}
		}
	case *mcp.ServerRequest[*WebhookParams]:
		if r.Params == nil {
			r.Params = &WebhookParams{}
		}
	}
}

// beginWebhooks is the prologue of the webhook methods: the tasks/*
// gate, for methods both dialects have.
func beginWebhooks(ctx context.Context, method string) (*Request, error) {
	q := RequestFrom(ctx)
	if q == nil {
		return nil, mcptask.InternalError("taskrouter middleware not installed")
	}
	if q.Dialect.NegotiatesPerRequest() && !q.Declared {
		return nil, mcptask.MissingExtension(method)
	}
	return q, q.OwnerErr
}

func (w *webhooks) registerMethod(ctx context.Context, _ *mcp.ServerSession, p *RegisterWebhookParams) (mcp.Result, error) {
	q, err := beginWebhooks(ctx, mcptask.MethodWebhooksRegister)
	if err != nil {
		return nil, err
	}
	wh, secret, err := w.register(ctx, q, WebhookRegistration{URL: p.URL, Events: p.Events, TaskID: p.TaskID, Owner: p.Owner, Secret: p.Secret})
	if err != nil {
		return nil, err
	}
	return &registerWebhookResult{ResultType: mcptask.ResultTypeComplete, Webhook: wh, Secret: secret}, nil
}

func (w *webhooks) listMethod(ctx context.Context, _ *mcp.ServerSession, p *WebhookParams) (mcp.Result, error) {
	q, err := beginWebhooks(ctx, mcptask.MethodWebhooksList)
	if err != nil {
		return nil, err
	}
	hooks, err := w.list(ctx, q, p.TaskID)
	if err != nil {
		return nil, err
	}
	return &listWebhooksResult{ResultType: mcptask.ResultTypeComplete, Webhooks: hooks}, nil
}

func (w *webhooks) deleteMethod(ctx context.Context, _ *mcp.ServerSession, p *WebhookParams) (mcp.Result, error) {
	q, err := beginWebhooks(ctx, mcptask.MethodWebhooksDelete)
	if err != nil {
		return nil, err
	}
	if err := w.remove(ctx, q, p.WebhookID); err != nil {
		return nil, err
	}
	return &ackResult{ResultType: mcptask.ResultTypeComplete}, nil
}

func (w *webhooks) deliveriesMethod(ctx context.Context, _ *mcp.ServerSession, p *WebhookParams) (mcp.Result, error) {
	q, err := beginWebhooks(ctx, mcptask.MethodWebhooksDeliveries)
	if err != nil {
		return nil, err
	}
	ds, next, err := w.deliveries(ctx, q, p.WebhookID, p.Cursor)
	if err != nil {
		return nil, err
	}
	return &deliveriesResult{ResultType: mcptask.ResultTypeComplete, Deliveries: ds, NextCursor: next}, nil
}
