package integration

// The hostile-input suite's families of issue 41: what one client may do
// to another's webhooks, deliveries, queue places and debounced starts,
// with real HTTP clients (anonymous stateless, anonymous with sessions,
// two bearer tokens), and the smaller findings (resumption ids, numbers
// at their extremes, a limit's wait in a status).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// TestHostileStreamResumeIDs: a GET resuming a tasks/stream answers with
// the request id its Last-Event-ID carries; a forged one must be an id a
// POST may carry (a string, or an integer within ±(2^53−1)). An object,
// null, 1e300, 2.5, 2^53+1, true, an array or undecodable bytes are a 400
// with -32600 and a null id, never echoed; a forged string id is
// resumed as the server would have written it.
func TestHostileStreamResumeIDs(t *testing.T) {
	s := newRelServer(t, relServerOptions{})
	ctx := relCtx(t, time.Minute)
	ex := newRelClient(s.url, newRelHTTPClient(2), relExt, "")
	id := relTaskID(ex.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": "r"}}))
	require.NotEmpty(t, id)
	sse := openSSE(t, s.url, mcptask.Extension, id)
	primer := sse.raw(t)
	_ = sse.body.Close()
	parts := strings.Split(primer.id, ".")
	require.Len(t, parts, 5, "tbs1.<seq>.<dialect>.<task>.<request id>: %s", primer.id)
	forge := func(reqID string) string {
		return strings.Join(append(parts[:4:4], base64.RawURLEncoding.EncodeToString([]byte(reqID))), ".")
	}
	get := func(last string) (*http.Response, []byte) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", last)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, body
	}
	for _, bad := range []string{`{"a":1}`, `null`, `1e300`, `2.5`, `9007199254740993`, `-9007199254740993`, `true`, `[1]`, `"unterminated`, ``} {
		resp, body := get(forge(bad))
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "id %s: %s", bad, body)
		var reply struct {
			ID    json.RawMessage `json:"id"`
			Error *relRPCError    `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &reply), "id %s: %s", bad, body)
		require.Equal(t, "null", string(reply.ID), "id %s: nothing of the header is echoed", bad)
		require.NotNil(t, reply.Error)
		require.EqualValues(t, mcptask.CodeInvalidRequest, reply.Error.Code)
		require.Contains(t, reply.Error.Message, "Last-Event-ID")
	}
	// Bytes that are no base64 at all in the request id's place.
	resp, _ := get(strings.Join(append(parts[:4:4], "!!"), "."))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	// Ids a POST may carry resume the stream and answer with that id.
	for _, good := range []string{`"forged-but-fine"`, `9007199254740991`, `-3`} {
		resp, body := get(forge(good))
		require.Equal(t, http.StatusOK, resp.StatusCode, "id %s: %s", good, body)
		require.Contains(t, string(body), `"id":`+good, "id %s", good)
	}
}

// ownersStart starts workflow name for c (prompts/get) and returns its
// task id.
func ownersStart(t *testing.T, ctx context.Context, c *relClient, name string, args map[string]any) string {
	t.Helper()
	return relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": name, "arguments": args})).TaskID
}

// queuedOn and running tell a queued workflow from one whose deploy runs.
func queuedOn(q string) func(map[string]any) bool {
	return func(task map[string]any) bool {
		msg, _ := task["statusMessage"].(string)
		return strings.Contains(msg, fmt.Sprintf("the workflow is queued on %q", q))
	}
}

func running(task map[string]any) bool {
	msg, _ := task["statusMessage"].(string)
	return strings.HasPrefix(msg, "running ")
}

// TestHostileQueueOwners (bbolt, PostgreSQL): queue keys are their
// owner's unless the queue declares them shared. Two users, two
// anonymous sessions and two anonymous stateless clients each deploy the
// same repo on a queue of one deploy per repo: by default each one's
// deploy runs at once (another owner's does not hold its key), a second
// deploy of one's own waits and names one's own first; with shared keys
// the second owner waits, and its status never names the other's task
// (whose id would be its access, anonymously). A debounced start never
// cancels another owner's waiting start; one's own is replaced, naming
// the newer start. A priority of 1e308 goes before -5.
func TestHostileQueueOwners(t *testing.T) {
	for _, be := range hostileStores {
		t.Run(be.name, func(t *testing.T) {
			ctx := relCtx(t, 3*time.Minute)
			s := newOwnersServer(t, ownersOptions{db: be.spec(t)})
			c := s.clients(t, ctx)
			pairs := []struct {
				name         string
				first, other *relClient
			}{
				{"tokens", c.alice, c.bob},
				{"sessions", c.sessA, c.sessB},
				{"stateless", c.anonA, c.anonB},
			}
			for i, p := range pairs {
				repo := fmt.Sprint("repo-", i)
				first := ownersStart(t, ctx, p.first, "deploy", map[string]any{"repo": repo})
				ownersWait(t, ctx, p.first, first, "its deploy runs", running)
				other := ownersStart(t, ctx, p.other, "deploy", map[string]any{"repo": repo})
				ownersWait(t, ctx, p.other, other, p.name+": another owner's deploy of the same repo runs at once", running)
				again := ownersStart(t, ctx, p.first, "deploy", map[string]any{"repo": repo})
				if p.name == "stateless" {
					// Each start of a stateless anonymous client is a
					// scope of its own (no client can be told from
					// another): its key is nobody else's.
					ownersWait(t, ctx, p.first, again, p.name+": every stateless start runs alone", running)
					continue
				}
				task := ownersWait(t, ctx, p.first, again, p.name+": a second deploy of one's own waits", queuedOn("deploys"))
				msg := task["statusMessage"].(string)
				require.Contains(t, msg, "held by task "+first, "%s: one's own holder is named", p.name)
				require.NotContains(t, msg, other)
			}

			// Debounce: another owner's start of the same key cancels
			// nothing; one's own replaces one's waiting start.
			for _, p := range pairs {
				mine := ownersStart(t, ctx, p.first, "notify", map[string]any{"user": "ann"})
				ownersWait(t, ctx, p.first, mine, "it waits for its debounce window", queuedOn("notify"))
				theirs := ownersStart(t, ctx, p.other, "notify", map[string]any{"user": "ann"})
				ownersWait(t, ctx, p.other, theirs, "it waits for its debounce window", queuedOn("notify"))
				task := ownersTask(t, ctx, p.first, mine)
				require.Equal(t, "working", task["status"], "%s: another owner's start replaced nothing: %v", p.name, task)
				if p.name == "stateless" {
					continue // every stateless start is its own owner's
				}
				newer := ownersStart(t, ctx, p.first, "notify", map[string]any{"user": "ann"})
				task = ownersWait(t, ctx, p.first, mine, "one's own newer start replaces it", func(task map[string]any) bool { return task["status"] == "cancelled" })
				require.Contains(t, task["statusMessage"], "replaced by task "+newer)
				require.Equal(t, "working", ownersTask(t, ctx, p.other, theirs)["status"], "%s: the other owner's start stays", p.name)
			}

			// Priorities at their extremes on a queue of one (shared): the
			// holder's id is never named to the others.
			holder := ownersStart(t, ctx, c.alice, "ordered", map[string]any{"repo": "h"})
			ownersWait(t, ctx, c.alice, holder, "it holds the place", running)
			low := ownersStart(t, ctx, c.bob, "ordered", map[string]any{"repo": "low", "priority": "-5"})
			high := ownersStart(t, ctx, c.bob, "ordered", map[string]any{"repo": "high", "priority": "1e308"})
			anon := ownersStart(t, ctx, c.anonA, "ordered", map[string]any{"repo": "anon", "priority": "0"})
			for _, w := range []struct {
				c  *relClient
				id string
			}{{c.bob, low}, {c.bob, high}, {c.anonA, anon}} {
				task := ownersWait(t, ctx, w.c, w.id, "it waits", queuedOn("one"))
				require.NotContains(t, task["statusMessage"], holder, "another owner's holder is not named")
			}
			s.release("h")
			ownersWait(t, ctx, c.alice, holder, "it ended", func(task map[string]any) bool { return task["status"] == "completed" })
			ownersWait(t, ctx, c.bob, high, "1e308 goes first", running)
			task := ownersTask(t, ctx, c.bob, low)
			require.True(t, queuedOn("one")(task), "-5 still waits: %v", task)
			require.NotContains(t, task["statusMessage"], high, "its holder is bob's own, but bob's tasks here are not named on a shared queue")

			// Keys the server declares shared: another owner's deploy of
			// the repo waits, and is never told who holds it.
			shared := newOwnersServer(t, ownersOptions{db: be.spec(t), sharedKeys: true})
			sc := shared.clients(t, ctx)
			for i, p := range []struct {
				name         string
				first, other *relClient
			}{{"tokens", sc.alice, sc.bob}, {"sessions", sc.sessA, sc.sessB}, {"stateless", sc.anonA, sc.anonB}} {
				repo := fmt.Sprint("shared-", i)
				first := ownersStart(t, ctx, p.first, "deploy", map[string]any{"repo": repo})
				ownersWait(t, ctx, p.first, first, "its deploy runs", running)
				other := ownersStart(t, ctx, p.other, "deploy", map[string]any{"repo": repo})
				task := ownersWait(t, ctx, p.other, other, p.name+": a shared key holds another owner's deploy", queuedOn("deploys"))
				require.Contains(t, task["statusMessage"], fmt.Sprintf("key %q has them", repo))
				require.NotContains(t, task["statusMessage"], first, "%s: the holder, another owner's, is not named", p.name)
				rep, err := p.other.call(ctx, "tasks/cancel", map[string]any{"taskId": first})
				require.NoError(t, err)
				if p.name != "tokens" {
					// Had it been named, this cancel would have worked:
					// the id is an anonymous task's only guard.
					require.Nil(t, rep.Err, "%v", rep)
					continue
				}
				require.NotNil(t, rep.Err, "%s: another user's task is not theirs to cancel", p.name)
			}
		})
	}
}

// TestHostileChildWaitsForRoom: a child workflow that has no room under
// the task limits yet makes its parent's status name the limit (it read
// `step "notes" failed (attempt 0 of 1 in a row): ; retrying at …`); it
// starts once room frees, and the parent completes. The child of a
// user's task is that user's alone, as its parent is (it was reachable
// by id anonymously); the child of an anonymous task is reachable by id,
// as its parent is.
func TestHostileChildWaitsForRoom(t *testing.T) {
	ctx := relCtx(t, 2*time.Minute)
	s := newOwnersServer(t, ownersOptions{router: taskrouter.Options{MaxPendingPerOwner: 2}})
	c := s.clients(t, ctx)
	long := relTaskID(c.alice.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 60000, "label": "long"}}))
	require.NotEmpty(t, long)
	parent := ownersStart(t, ctx, c.alice, "train", map[string]any{"repo": "r"})
	task := ownersWait(t, ctx, c.alice, parent, "it names the limit its child waits under", func(task map[string]any) bool {
		return strings.Contains(fmt.Sprint(task["statusMessage"]), "MaxPendingPerOwner")
	})
	msg := task["statusMessage"].(string)
	require.Contains(t, msg, `step "notes" has not started child workflow "notes": it waits for room under the server's task limit`)
	require.NotContains(t, msg, "failed (attempt 0")
	c.alice.must(t, ctx, "tasks/cancel", map[string]any{"taskId": long})
	ownersWait(t, ctx, c.alice, parent, "the child started once room freed, and ended", func(task map[string]any) bool { return task["status"] == "completed" })

	childOf := func(owner, parent string) string {
		page, err := s.st.List(ctx, store.ListOptions{Owner: owner})
		require.NoError(t, err)
		for _, tk := range page.Tasks {
			if tk.Labels[workflow.LabelParent] == parent {
				return tk.ID
			}
		}
		t.Fatalf("no child of %s", parent)
		return ""
	}
	child := childOf("user:alice", parent)
	require.Equal(t, child, ownersTask(t, ctx, c.alice, child)["taskId"])
	for _, other := range []*relClient{c.anonA, c.sessA, c.bob} {
		rep, err := other.call(ctx, "tasks/get", map[string]any{"taskId": child})
		require.NoError(t, err)
		require.NotNil(t, rep.Err, "alice's child is hers alone: %v", rep)
		require.EqualValues(t, mcptask.CodeInvalidParams, rep.Err.Code)
	}
	anonParent := ownersStart(t, ctx, c.anonA, "train", map[string]any{"repo": "a"})
	ownersWait(t, ctx, c.anonA, anonParent, "it ended", func(task map[string]any) bool { return task["status"] == "completed" })
	anonChild := childOf(taskrouter.LocalOwner, anonParent)
	require.Equal(t, anonChild, ownersTask(t, ctx, c.anonB, anonChild)["taskId"], "an anonymous task's child is reachable by id, as its parent")
}
