package client

import (
	"context"
	"encoding/json"
	"errors"
	"iter"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Push webhooks: a taskbridge server POSTs signed deliveries to a
// registered URL when a task ends, needs input, pauses for its client or
// runs a step (mcptask.WebhookEvent). These calls use the server's
// io.taskbridge/webhooks/* methods (both dialects); a server without them
// answers with an error that errors.Is reports as ErrCapability. Verify
// the deliveries with package push.

// WebhookOptions shape RegisterWebhook.
type WebhookOptions struct {
	// Events are what the webhook is told of; nil means the server's
	// default (mcptask.DefaultWebhookEvents: terminal, input_required,
	// paused).
	Events []mcptask.WebhookEvent
	// TaskID names the one task to watch; empty means every task of this
	// client's owner, which the server refuses to a client it cannot
	// tell apart (stateless HTTP without a token: give a task).
	TaskID string
	// Owner, for an administrator of the server only, names another
	// owner whose tasks to watch ("*": every owner's).
	Owner string
	// Secret signs the deliveries ("whsec_" + base64 of 24 to 64 bytes);
	// empty lets the server make one.
	Secret string
}

// RegisterWebhook registers url as a webhook and returns it with the
// secret that signs its deliveries (the only time the server shows the
// secret).
func (c *Client) RegisterWebhook(ctx context.Context, url string, opts *WebhookOptions) (*mcptask.Webhook, string, error) {
	params := map[string]any{"url": url}
	if opts != nil {
		if len(opts.Events) > 0 {
			params["events"] = opts.Events
		}
		for k, v := range map[string]string{"taskId": opts.TaskID, "owner": opts.Owner, "secret": opts.Secret} {
			if v != "" {
				params[k] = v
			}
		}
	}
	var res struct {
		Webhook *mcptask.Webhook `json:"webhook"`
		Secret  string           `json:"secret"`
	}
	if err := c.webhookCall(ctx, mcptask.MethodWebhooksRegister, params, &res); err != nil {
		return nil, "", err
	}
	if res.Webhook == nil || res.Webhook.WebhookID == "" || res.Secret == "" {
		return nil, "", malformed("%s returned no webhook or no secret", mcptask.MethodWebhooksRegister)
	}
	return res.Webhook, res.Secret, nil
}

// Webhooks lists this client's webhooks (an administrator's: every one),
// those watching taskID only when it is not empty.
func (c *Client) Webhooks(ctx context.Context, taskID string) ([]mcptask.Webhook, error) {
	params := map[string]any{}
	if taskID != "" {
		params["taskId"] = taskID
	}
	var res struct {
		Webhooks []mcptask.Webhook `json:"webhooks"`
	}
	if err := c.webhookCall(ctx, mcptask.MethodWebhooksList, params, &res); err != nil {
		return nil, err
	}
	return res.Webhooks, nil
}

// DeleteWebhook deletes one of this client's webhooks; its pending
// deliveries are dropped.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	var res json.RawMessage
	return c.webhookCall(ctx, mcptask.MethodWebhooksDelete, map[string]any{"webhookId": id}, &res)
}

// WebhookDeliveries iterates over a webhook's deliveries, newest first
// (all pages): pending ones with their next attempt, delivered ones, and
// the ones that gave up, with the last error.
func (c *Client) WebhookDeliveries(ctx context.Context, id string) iter.Seq2[mcptask.WebhookDelivery, error] {
	return func(yield func(mcptask.WebhookDelivery, error) bool) {
		cursor := ""
		seen := map[string]bool{}
		for {
			params := map[string]any{"webhookId": id}
			if cursor != "" {
				params["cursor"] = cursor
			}
			var page struct {
				Deliveries []mcptask.WebhookDelivery `json:"deliveries"`
				NextCursor string                    `json:"nextCursor"`
			}
			if err := c.webhookCall(ctx, mcptask.MethodWebhooksDeliveries, params, &page); err != nil {
				yield(mcptask.WebhookDelivery{}, err)
				return
			}
			for _, d := range page.Deliveries {
				if !yield(d, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			if seen[page.NextCursor] {
				yield(mcptask.WebhookDelivery{}, malformed("%s returned cursor %q twice", mcptask.MethodWebhooksDeliveries, page.NextCursor))
				return
			}
			seen[page.NextCursor] = true
			cursor = page.NextCursor
		}
	}
}

// webhookCall sends a webhook method and decodes its result into out; a
// server without the method is ErrCapability.
func (c *Client) webhookCall(ctx context.Context, method string, params map[string]any, out any) error {
	raw, err := c.call(ctx, method, params)
	if err != nil {
		var re *RPCError
		if errors.As(err, &re) && re.Code == mcptask.CodeMethodNotFound {
			re.kind = ErrCapability
		}
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return malformed("%s: %v", method, err)
	}
	return nil
}
