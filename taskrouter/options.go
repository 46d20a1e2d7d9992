package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// Defaults for Options fields left zero.
const (
	DefaultPollInterval          = 500 * time.Millisecond
	DefaultTTL                   = time.Hour
	DefaultMaxTTL                = 24 * time.Hour
	DefaultMaxConcurrent         = 256
	DefaultMaxConcurrentPerOwner = 32
	DefaultMaxPendingPerOwner    = 1024
	DefaultMaxPendingPerSource   = 256
	DefaultMaxPending            = 8192
	DefaultSweepInterval         = 30 * time.Second
	DefaultExpiredGrace          = 5 * time.Minute
	DefaultLeaseDuration         = 10 * time.Second
	DefaultChangePollInterval    = time.Second
	DefaultInstantWindow         = time.Millisecond
	DefaultHostDeadline          = 25 * time.Second
)

// An OwnerFunc decides which principal a request acts for. Tasks belong to
// the owner that created them; every other owner sees "not found".
type OwnerFunc func(ctx context.Context, req mcp.Request) (string, error)

// Options configure a Router (NewRouter). A nil *Options, and every
// zero field, means the default; NewRouter fills the defaults in and
// refuses values that cannot work, naming the field. The environment's
// settings (TASKBRIDGE_*) are read by OptionsFromEnv.
type Options struct {
	// Logger receives engine logs; nil discards them.
	Logger *slog.Logger
	// PollInterval is suggested to clients in every task.
	PollInterval time.Duration
	// DefaultTTL applies when a request asks for no ttl.
	DefaultTTL time.Duration
	// MaxTTL caps every requested ttl; the actual value is reported back.
	MaxTTL time.Duration
	// TaskTimeout bounds how long one task's handler may run; zero means no
	// bound beyond the task's ttl.
	TaskTimeout time.Duration
	// MaxConcurrent bounds how many task handlers run at once; more tasks
	// wait in "working" with a "queued: ..." status message until a slot
	// frees up.
	MaxConcurrent int
	// MaxConcurrentPerOwner bounds how many handlers one owner runs at once.
	MaxConcurrentPerOwner int
	// MaxConcurrentSteps bounds how many step tools run at once: the tools
	// a component runs in process for a task's steps (Track, then RunTool:
	// a workflow's server steps, and the client steps it performs for a
	// continuation or a webhook). A step beyond it waits for a slot. It is
	// a pool apart from MaxConcurrent's, so that a tool task that waits
	// for a workflow never holds the slot the workflow's step needs; a
	// step whose tool calls another tool in process (with the step's
	// context) takes no second slot. Zero means MaxConcurrent's value.
	MaxConcurrentSteps int
	// MaxPendingPerOwner bounds one owner's queued plus running tasks; a
	// request past it fails with CodeTooManyTasks. Every task the engine
	// creates counts (tool tasks until their handler returns; workflow
	// tasks, forks and other tasks created through CreateTask until they
	// end). It does not apply to the
	// shared LocalOwner of unauthenticated stateless requests, which is no
	// single requestor: MaxPendingPerSource bounds those.
	MaxPendingPerOwner int
	// MaxPendingPerSource bounds the queued plus running tasks created
	// from one source: one session (stdio, in-memory, stateful HTTP), or
	// one remote IP address for stateless HTTP. It keeps one anonymous
	// client from filling the server for everyone.
	MaxPendingPerSource int
	// MaxPending bounds all queued plus running tasks of the process.
	MaxPending int
	// SweepInterval is how often expired tasks are swept.
	SweepInterval time.Duration
	// ExpiredGrace is how long a task that was still running when its ttl
	// ran out stays readable (as failed) before it is deleted.
	ExpiredGrace time.Duration
	// Owner maps a request to its owner; nil means DefaultOwner.
	Owner OwnerFunc
	// SessionBound makes tasks created without an authorization context
	// visible to their owner only (with DefaultOwner: the session that
	// created them; a client that reconnects loses them). By default such
	// tasks are id-capabilities instead: any unauthenticated requestor that
	// presents the task id (80 random bits; see NewTaskID) may get, wait on, cancel and
	// continue it, from any session and after restarts, while tasks/list
	// still shows only the requestor's own tasks. Requests with an
	// authorization context always see only their own tasks, whatever this
	// says.
	SessionBound bool
	// DisableFastPath sends the task methods and the tools/call of the
	// router's tools through go-sdk's dispatch on every transport, as
	// HTTPOptions.
	// DisableFastPath does for one HTTP handler. The fast path answers
	// them identically at a fraction of the cost (see the package
	// documentation); this is the switch for an operator who wants the
	// SDK's path anyway (env TASKBRIDGE_FAST_PATH=off).
	DisableFastPath bool
	// ImmediateResponse, when set, produces the optional core-dialect
	// model-immediate-response text for a newly created tool task.
	ImmediateResponse func(tool string, task *store.Task) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Observer, when set, learns of every committed task change and of
	// handler activity (metrics, traces, dashboards). See Observer.
	Observer Observer
	// ReplicaID names this process as a lease holder; it must differ
	// between processes sharing a store. Empty means host-pid-random.
	ReplicaID string
	// LeaseDuration is how long a lease lasts unless renewed (renewal runs
	// three times per duration). On a shared store it bounds how long the
	// tasks of a dead process wait before another process takes them over.
	LeaseDuration time.Duration
	// ChangePollInterval is how often, on a shared store, waiters re-read
	// their task in case a change notification from another process was
	// lost.
	ChangePollInterval time.Duration
	// InstantWindow is how long a task-augmented tools/call waits for its
	// handler before storing the working task. A handler that returns
	// within it has its task created already ended, outcome included: one
	// durable write instead of two, before the reply as always. A handler
	// still running then has its working task stored at once (also as
	// soon as it asks for its TaskID, asks for input or waits for a
	// running slot), so a slow tool's reply waits at most this long. Zero
	// means DefaultInstantWindow; a negative value turns folding off.
	InstantWindow time.Duration
	// HostDeadline bounds how long a plain tools/call of a task-capable
	// tool (one the client did not ask to run as a task: every call an LLM
	// host makes) holds the request. A tool still running then goes on as
	// a durable task, exactly as if the client had asked for one, and the
	// call returns an ordinary tool result naming the task and how to get
	// its result (the task_result tool, or tasks/get). A tool that ends in
	// time answers as a plain call does, and nothing is stored. Zero means
	// DefaultHostDeadline; a negative value runs such calls to their end,
	// holding the request, as plain calls.
	HostDeadline time.Duration
	// Push configures webhooks and their deliveries (see PushOptions).
	Push PushOptions
}

// withDefaults fills every zero field with its default; negative values
// are left for validate to refuse.
func (c Options) withDefaults() Options {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setDuration := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setInt := func(n *int, def int) {
		if *n == 0 {
			*n = def
		}
	}
	setDuration(&c.PollInterval, DefaultPollInterval)
	setDuration(&c.MaxTTL, DefaultMaxTTL)
	if c.DefaultTTL == 0 {
		c.DefaultTTL = min(DefaultTTL, c.MaxTTL)
	}
	setDuration(&c.SweepInterval, DefaultSweepInterval)
	setDuration(&c.ExpiredGrace, DefaultExpiredGrace)
	setDuration(&c.LeaseDuration, DefaultLeaseDuration)
	setDuration(&c.ChangePollInterval, DefaultChangePollInterval)
	setDuration(&c.InstantWindow, DefaultInstantWindow)
	setDuration(&c.HostDeadline, DefaultHostDeadline)
	if c.ReplicaID == "" {
		c.ReplicaID = defaultReplicaID()
	}
	setInt(&c.MaxConcurrent, DefaultMaxConcurrent)
	setInt(&c.MaxConcurrentPerOwner, DefaultMaxConcurrentPerOwner)
	setInt(&c.MaxConcurrentSteps, c.MaxConcurrent)
	setInt(&c.MaxPendingPerOwner, DefaultMaxPendingPerOwner)
	setInt(&c.MaxPendingPerSource, DefaultMaxPendingPerSource)
	setInt(&c.MaxPending, DefaultMaxPending)
	if c.Owner == nil {
		c.Owner = DefaultOwner
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Push = c.Push.withDefaults()
	return c
}

// validate refuses values that cannot work, naming the field and why.
func (c Options) validate() error {
	var errs []error
	bad := func(field string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("taskrouter: Options.%s: "+format, append([]any{field}, args...)...))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PollInterval", c.PollInterval}, {"DefaultTTL", c.DefaultTTL}, {"MaxTTL", c.MaxTTL},
		{"TaskTimeout", c.TaskTimeout}, {"SweepInterval", c.SweepInterval}, {"ExpiredGrace", c.ExpiredGrace},
		{"LeaseDuration", c.LeaseDuration}, {"ChangePollInterval", c.ChangePollInterval},
	} {
		if d.v < 0 {
			bad(d.name, "is negative (%s); use zero for the default", d.v)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"MaxConcurrent", c.MaxConcurrent}, {"MaxConcurrentPerOwner", c.MaxConcurrentPerOwner}, {"MaxConcurrentSteps", c.MaxConcurrentSteps},
		{"MaxPendingPerOwner", c.MaxPendingPerOwner}, {"MaxPendingPerSource", c.MaxPendingPerSource}, {"MaxPending", c.MaxPending},
	} {
		if n.v < 0 {
			bad(n.name, "is negative (%d); use zero for the default", n.v)
		}
	}
	if c.DefaultTTL > c.MaxTTL && c.MaxTTL > 0 {
		bad("DefaultTTL", "(%s) is longer than MaxTTL (%s)", c.DefaultTTL, c.MaxTTL)
	}
	return errors.Join(append(errs, c.Push.validate())...)
}

// LocalOwner is the owner of requests that carry neither an authenticated
// user nor a session (stdio, in-memory, stateless HTTP).
const LocalOwner = "local"

// DefaultOwner is the default owner policy:
//
//  1. an authenticated request (go-sdk TokenInfo) acts for "user:<UserID>";
//     a token without a UserID is refused, because tasks could not be kept
//     apart;
//  2. otherwise a request on a session with an id (stateful Streamable HTTP)
//     acts for "session:<id>";
//  3. otherwise (stdio, in-memory, stateless HTTP) it acts for LocalOwner.
func DefaultOwner(_ context.Context, req mcp.Request) (string, error) {
	if req == nil {
		return LocalOwner, nil
	}
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		if extra.TokenInfo.UserID == "" {
			return "", fmt.Errorf("authenticated request has no user id; set taskrouter.Options.Owner")
		}
		return "user:" + extra.TokenInfo.UserID, nil
	}
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
		if id := ss.ID(); id != "" {
			return "session:" + id, nil
		}
	}
	return LocalOwner, nil
}

// defaultReplicaID names this process: host, pid and 4 random bytes.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), NewTaskID()[24:])
}
