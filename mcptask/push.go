package mcptask

// The vocabulary of push: webhooks a client (or the server's
// configuration) registers to be told, by an HTTP POST, when a task ends,
// needs input, pauses for its client or runs a step. The methods are
// taskbridge's own (namespaced: no MCP specification has them yet), in
// both dialects. Package push holds the delivery's body and signature.

// The webhook methods.
const (
	// MethodWebhooksRegister registers a webhook. Params: url, events,
	// taskId (omitted: every task of the requestor), owner (an
	// administrator's hook for another owner's tasks, or "*" for every
	// owner's), secret (omitted: the server makes one). Result:
	// {"webhook": Webhook, "secret": "whsec_..."}.
	MethodWebhooksRegister = "io.taskbridge/webhooks/register"
	// MethodWebhooksList lists the requestor's webhooks. Params: taskId
	// (optional: only that task's). Result: {"webhooks": [Webhook]}.
	MethodWebhooksList = "io.taskbridge/webhooks/list"
	// MethodWebhooksDelete deletes a webhook. Params: webhookId. Result:
	// {} (an empty object).
	MethodWebhooksDelete = "io.taskbridge/webhooks/delete"
	// MethodWebhooksDeliveries lists a webhook's deliveries, newest first.
	// Params: webhookId, cursor. Result: {"deliveries":
	// [WebhookDelivery], "nextCursor": "..."}.
	MethodWebhooksDeliveries = "io.taskbridge/webhooks/deliveries"
)

// WebhookEvent names a kind of moment a webhook asks to be told of.
type WebhookEvent string

// The webhook events.
const (
	// WebhookTerminal: the task ended (completed, failed, cancelled); its
	// EventStatus event.
	WebhookTerminal WebhookEvent = "terminal"
	// WebhookInputRequired: the task entered input_required; its
	// EventStatus event.
	WebhookInputRequired WebhookEvent = "input_required"
	// WebhookPaused: a workflow stopped running steps: it waits for its
	// client to perform one, or an operator paused it (or it paused
	// itself on a failure, PauseOnFailure) and it waits to be resumed;
	// its EventPaused event (PausedEvent.By tells the two apart).
	WebhookPaused WebhookEvent = "paused"
	// WebhookStep: a workflow step began or ended an attempt, or a
	// workflow, step or item waits for its place on a queue; its
	// EventStepStarted, EventStepEnded and EventStepQueued events.
	WebhookStep WebhookEvent = "step"
)

// WebhookEvents are every webhook event, in a stable order.
var WebhookEvents = []WebhookEvent{WebhookTerminal, WebhookInputRequired, WebhookPaused, WebhookStep}

// DefaultWebhookEvents are what a registration without events asks for:
// the moments a client must act on.
var DefaultWebhookEvents = []WebhookEvent{WebhookTerminal, WebhookInputRequired, WebhookPaused}

// Valid reports whether e is one of the webhook events.
func (e WebhookEvent) Valid() bool {
	switch e {
	case WebhookTerminal, WebhookInputRequired, WebhookPaused, WebhookStep:
		return true
	}
	return false
}

// WebhookEventOf returns the webhook event an entry of a task's event log
// is, and whether it is one: t is the entry's type, status the status an
// EventStatus entry reports (ignored for the others).
func WebhookEventOf(t EventType, status Status) (WebhookEvent, bool) {
	switch t {
	case EventStatus:
		switch {
		case status.Terminal():
			return WebhookTerminal, true
		case status == StatusInputRequired:
			return WebhookInputRequired, true
		}
	case EventPaused:
		return WebhookPaused, true
	case EventStepStarted, EventStepEnded, EventStepQueued:
		return WebhookStep, true
	}
	return "", false
}

// Event types of push, beside those of events.go.
const (
	// EventPaused: a workflow stopped running steps and waits for its
	// client (a client step reached, a server step handed over), or for
	// an operator to resume it (paused by one, or by the server on a
	// failure). Payload: PausedEvent.
	EventPaused EventType = "paused"
	// EventPushFailed: a push delivery about the task gave up (its
	// attempts or its age ran out). Written while the task is active (an
	// ended task takes no more events: its webhook and the delivery show
	// the failure). Payload: PushFailedEvent.
	EventPushFailed EventType = "push_failed"
)

// PausedEvent is the payload of EventPaused.
type PausedEvent struct {
	// Reason is the workflow's pause reason (its status message).
	Reason string `json:"reason"`
	// ClientSteps names the steps the client may perform now.
	ClientSteps []string `json:"clientSteps,omitempty"`
	// By, for a workflow paused until someone resumes it, names who
	// paused it (an operator's name, or "the server" for a pause on a
	// failure); empty when it waits for its client.
	By string `json:"by,omitempty"`
}

// PushFailedEvent is the payload of EventPushFailed.
type PushFailedEvent struct {
	WebhookID  string `json:"webhookId"`
	DeliveryID string `json:"deliveryId"`
	// Seq is the number of the event the delivery reported.
	Seq      uint64 `json:"seq"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
}

// Webhook is a registration as the webhook methods show it (never with
// its secret).
type Webhook struct {
	// WebhookID names it.
	WebhookID string `json:"webhookId"`
	// URL is where deliveries go.
	URL string `json:"url"`
	// Events are what it asks to be told of.
	Events []WebhookEvent `json:"events"`
	// TaskID is the one task it watches; empty for every task of Owner.
	TaskID string `json:"taskId,omitempty"`
	// Owner is whose tasks it watches when TaskID is empty ("*": every
	// owner's); shown to administrators only.
	Owner string `json:"owner,omitempty"`
	// Static marks a webhook of the server's configuration (it cannot be
	// deleted with MethodWebhooksDelete).
	Static bool `json:"static,omitempty"`
	// CreatedAt is when it was registered (RFC 3339); events before it
	// are not delivered.
	CreatedAt string `json:"createdAt"`
	// Failures counts the deliveries that gave up.
	Failures int `json:"failures,omitempty"`
	// LastError says why the last one gave up, and LastFailureAt when.
	LastError     string `json:"lastError,omitempty"`
	LastFailureAt string `json:"lastFailureAt,omitempty"`
}

// The states of a delivery (WebhookDelivery.Status).
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	DeliveryCancelled = "cancelled"
)

// WebhookDelivery is one delivery as MethodWebhooksDeliveries shows it.
type WebhookDelivery struct {
	// DeliveryID is the webhook-id header (the body's id).
	DeliveryID string `json:"deliveryId"`
	WebhookID  string `json:"webhookId"`
	// TaskID is the task it reports, and Seq the event of its log.
	TaskID string       `json:"taskId"`
	Seq    uint64       `json:"seq"`
	Type   WebhookEvent `json:"type"`
	// Status is DeliveryPending, DeliveryDelivered, DeliveryFailed or
	// DeliveryCancelled (the webhook was deleted).
	Status string `json:"status"`
	// Attempts counts the POSTs made.
	Attempts int `json:"attempts"`
	// LastError says why the last attempt failed.
	LastError string `json:"lastError,omitempty"`
	// NextAttemptAt is when a pending delivery is tried next (RFC 3339).
	NextAttemptAt string `json:"nextAttemptAt,omitempty"`
	CreatedAt     string `json:"createdAt"`
	UpdatedAt     string `json:"updatedAt"`
}
