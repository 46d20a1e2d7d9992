package taskrouter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
)

// Defaults of PushOptions.
const (
	DefaultPushMaxAttempts      = 8
	DefaultPushMaxAge           = 24 * time.Hour
	DefaultPushRetryBase        = 5 * time.Second
	DefaultPushRetryMax         = time.Hour
	DefaultPushTimeout          = 10 * time.Second
	DefaultPushRetention        = 24 * time.Hour
	DefaultPushWebhooksPerOwner = 32
	DefaultPushMaxWebhooks      = 10000
	DefaultPushAnonymousTTL     = 24 * time.Hour
	DefaultPushConcurrent       = 16
	DefaultPushPerReceiver      = 4
	DefaultPushRefreshInterval  = 30 * time.Second
	// maxPushDuration bounds every duration of PushOptions: a time a
	// delivery or a webhook lives must stay a time the store can hold.
	maxPushDuration              = 10 * 365 * 24 * time.Hour
	defaultPushScanWorkers       = 4
	maxPushURLBytes              = 2048
	defaultPushResolveTimeout    = 5 * time.Second
	defaultPushResponseReadBytes = 64 << 10
)

// PushOptions configure push: the webhooks clients register (the
// io.taskbridge/webhooks/* methods, Router.RegisterWebhook) and those the
// configuration declares (Hooks), and how their deliveries are made.
// Every zero field means its default. See the README, "Push".
type PushOptions struct {
	// Disabled turns push off: the webhook methods answer -32601 and no
	// delivery is made.
	Disabled bool
	// Hooks are webhooks the server's configuration declares: they exist
	// from the start on every replica, are not stored, and cannot be
	// deleted by a client.
	Hooks []StaticWebhook
	// Admins are owners (as Options.Owner names them) who may register
	// webhooks for any task and for other owners' tasks (the register
	// method's owner, "*" for every owner's), and who see and delete
	// every webhook. The server's own calls (a nil *Request) are an
	// administrator's.
	Admins []string
	// AllowHTTP allows http:// URLs to any host; by default only https://
	// URLs, and http:// ones to a loopback address (127.0.0.0/8, ::1,
	// localhost), are accepted.
	AllowHTTP bool
	// AllowPrivate allows deliveries to private, link-local and shared
	// address ranges (10/8, 172.16/12, 192.168/16, 169.254/16, 100.64/10,
	// fc00::/7, fe80::/10, ...). Without it a URL whose host is, or
	// resolves to, such an address is refused when it is registered and
	// again at every delivery (the host is resolved then, and only the
	// addresses allowed are dialled: DNS rebinding gains nothing).
	AllowPrivate bool
	// DenyLoopback refuses loopback addresses too (a server reachable
	// from the internet, whose clients must not make it POST to its own
	// local services).
	DenyLoopback bool
	// MaxAttempts bounds the POSTs of one delivery; zero means
	// DefaultPushMaxAttempts.
	MaxAttempts int
	// MaxAge bounds how long a delivery is retried after it was made;
	// zero means DefaultPushMaxAge.
	MaxAge time.Duration
	// RetryBase is the wait after a delivery's first failed attempt; it
	// doubles with each further one (with 10% jitter), up to RetryMax.
	// Zero means DefaultPushRetryBase and DefaultPushRetryMax.
	RetryBase, RetryMax time.Duration
	// Timeout bounds one attempt (connect, send, response headers); zero
	// means DefaultPushTimeout.
	Timeout time.Duration
	// Retention is how long a delivery's record is kept after its
	// retries ran out (for MethodWebhooksDeliveries and the dashboard);
	// zero means DefaultPushRetention.
	Retention time.Duration
	// MaxWebhooksPerOwner bounds the webhooks one owner registers (a
	// client without a token or a session, which is no one to count for,
	// registers webhooks for one task at a time: they count per task);
	// zero means DefaultPushWebhooksPerOwner.
	MaxWebhooksPerOwner int
	// MaxWebhooks bounds the webhooks registered in all (as this process
	// knows them); zero means DefaultPushMaxWebhooks.
	MaxWebhooks int
	// AnonymousTTL is how long a webhook for every task of a requestor
	// without authentication (a session's, a stdio client's) lives; zero
	// means DefaultPushAnonymousTTL. A webhook for one task lives as long
	// as its task (plus Retention); an authenticated requestor's until it
	// is deleted.
	AnonymousTTL time.Duration
	// MaxConcurrent bounds the delivery attempts running at once, on
	// workers of their own (never the scheduler's wake-ups); zero means
	// DefaultPushConcurrent.
	MaxConcurrent int
	// MaxConcurrentPerReceiver bounds the attempts running at once to one
	// receiver (a URL's scheme and host); zero means
	// DefaultPushPerReceiver. A receiver that leaves attempts unanswered
	// (timed out, no connection) 3 times in a row gets none for a while
	// (RetryBase, doubling up to RetryMax): see README "Push".
	MaxConcurrentPerReceiver int
	// RefreshInterval is how often the registered webhooks are re-read:
	// on a shared store, to learn of those other replicas registered or
	// deleted (a replica hears of its own at once, and of every task
	// change through the change feed); on any, to forget expired ones.
	// Zero means DefaultPushRefreshInterval.
	RefreshInterval time.Duration
}

// StaticWebhook is a webhook of the server's configuration
// (PushOptions.Hooks).
type StaticWebhook struct {
	// URL is where deliveries go (the same rules as a registered one's).
	URL string
	// Secret signs the deliveries: "whsec_" + base64 of 24 to 64 bytes
	// (push.NewSecret makes one).
	Secret string
	// Events are what it is told of; nil means
	// mcptask.DefaultWebhookEvents.
	Events []mcptask.WebhookEvent
	// Owner is whose tasks it watches; "" or "*" means every owner's.
	Owner string
}

func (o PushOptions) withDefaults() PushOptions {
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultPushMaxAttempts
	}
	for _, n := range []struct {
		v   *int
		def int
	}{
		{&o.MaxWebhooksPerOwner, DefaultPushWebhooksPerOwner}, {&o.MaxWebhooks, DefaultPushMaxWebhooks},
		{&o.MaxConcurrent, DefaultPushConcurrent}, {&o.MaxConcurrentPerReceiver, DefaultPushPerReceiver},
	} {
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	set(&o.AnonymousTTL, DefaultPushAnonymousTTL)
	set(&o.MaxAge, DefaultPushMaxAge)
	set(&o.RetryBase, DefaultPushRetryBase)
	set(&o.RetryMax, max(DefaultPushRetryMax, o.RetryBase))
	set(&o.Timeout, DefaultPushTimeout)
	set(&o.Retention, DefaultPushRetention)
	set(&o.RefreshInterval, DefaultPushRefreshInterval)
	return o
}

// validate refuses values that cannot work, naming the field.
func (o PushOptions) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("taskrouter: Options.Push.%s: "+format, append([]any{field}, args...)...))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"MaxAge", o.MaxAge}, {"RetryBase", o.RetryBase}, {"RetryMax", o.RetryMax},
		{"Timeout", o.Timeout}, {"Retention", o.Retention}, {"RefreshInterval", o.RefreshInterval},
		{"AnonymousTTL", o.AnonymousTTL},
	} {
		switch {
		case d.v < 0:
			bad(d.name, "is negative (%s); use zero for the default", d.v)
		case d.v > maxPushDuration:
			bad(d.name, "(%s) is longer than %s", d.v, maxPushDuration)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"MaxAttempts", o.MaxAttempts}, {"MaxWebhooksPerOwner", o.MaxWebhooksPerOwner}, {"MaxWebhooks", o.MaxWebhooks},
		{"MaxConcurrent", o.MaxConcurrent}, {"MaxConcurrentPerReceiver", o.MaxConcurrentPerReceiver},
	} {
		if n.v < 0 {
			bad(n.name, "is negative (%d); use zero for the default", n.v)
		}
	}
	if o.RetryMax < o.RetryBase {
		bad("RetryMax", "(%s) is shorter than RetryBase (%s)", o.RetryMax, o.RetryBase)
	}
	pol := o.policy()
	for i, h := range o.Hooks {
		field := fmt.Sprintf("Hooks[%d]", i)
		if _, err := pol.checkURL(h.URL); err != nil {
			bad(field+".URL", "%v", err)
		}
		if _, err := push.Key(h.Secret); err != nil {
			bad(field+".Secret", "%v (push.NewSecret makes one)", err)
		}
		if _, err := checkEvents(h.Events); err != nil {
			bad(field+".Events", "%v", err)
		}
		if isPushOwner(h.Owner) {
			bad(field+".Owner", "%q is a reserved owner", h.Owner)
		}
	}
	return errors.Join(errs...)
}

// checkEvents returns events without duplicates, in the order of
// mcptask.WebhookEvents (nil: the defaults), or an error naming the
// unknown one.
func checkEvents(events []mcptask.WebhookEvent) ([]mcptask.WebhookEvent, error) {
	if len(events) == 0 {
		return slices.Clone(mcptask.DefaultWebhookEvents), nil
	}
	for _, e := range events {
		if !e.Valid() {
			return nil, fmt.Errorf("unknown event %q (want %s)", e, joinEvents(mcptask.WebhookEvents))
		}
	}
	var out []mcptask.WebhookEvent
	for _, e := range mcptask.WebhookEvents {
		if slices.Contains(events, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

func joinEvents(events []mcptask.WebhookEvent) string {
	s := make([]string, len(events))
	for i, e := range events {
		s[i] = string(e)
	}
	return strings.Join(s, ", ")
}

func splitEvents(s string) []mcptask.WebhookEvent {
	var out []mcptask.WebhookEvent
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, mcptask.WebhookEvent(f))
	}
	return out
}

// isAdmin reports whether owner is one of Admins.
func (o PushOptions) isAdmin(owner string) bool {
	return owner != "" && slices.Contains(o.Admins, owner)
}
