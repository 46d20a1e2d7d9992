package storetest

// The task event log (store.Event, Store.Events): numbering, the store's
// own status events, appends in the same write as the state, pure
// appends, caps, reads, deletes and concurrent appenders.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// logLine is an EventLog event with message msg.
func logLine(msg string) store.Event {
	data, _ := json.Marshal(mcptask.LogEvent{Level: "info", Message: msg})
	return store.Event{Type: mcptask.EventLog, Data: data}
}

// logLines returns n log lines "prefix-0", "prefix-1", ...
func logLines(prefix string, n int) []store.Event {
	out := make([]store.Event, n)
	for i := range out {
		out[i] = logLine(fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// message returns the message of a log line, or the status of a status
// event, for comparing logs.
func message(t *testing.T, e store.Event) string {
	t.Helper()
	switch e.Type {
	case mcptask.EventLog:
		var l mcptask.LogEvent
		require.NoError(t, json.Unmarshal(e.Data, &l))
		return l.Message
	case mcptask.EventStatus:
		return "status:" + string(statusOf(t, e).Status)
	}
	return string(e.Type)
}

func statusOf(t *testing.T, e store.Event) mcptask.StatusEvent {
	t.Helper()
	require.Equal(t, mcptask.EventStatus, e.Type)
	var st mcptask.StatusEvent
	require.NoError(t, json.Unmarshal(e.Data, &st))
	return st
}

// readLog reads a task's whole log, page by page (limit events a page),
// checks the pages agree and the numbering is dense, and returns the
// events and the last page (its First, Last and Dropped describe the log
// read from 0).
func readLog(t *testing.T, s store.Store, id string, limit int) ([]store.Event, store.EventPage) {
	t.Helper()
	var (
		all   []store.Event
		first store.EventPage
		after uint64
	)
	for i := 0; ; i++ {
		require.Less(t, i, 10000, "reading the log does not end")
		page, err := s.Events(t.Context(), id, after, limit)
		require.NoError(t, err)
		if i == 0 {
			first = page
			if len(page.Events) > 0 {
				require.Equal(t, page.First, page.Events[0].Seq, "a read from 0 starts at the first kept")
			}
		}
		if len(page.Events) == 0 {
			require.GreaterOrEqual(t, after, page.Last, "an empty page only at the end")
			first.Events = all
			return all, first
		}
		require.LessOrEqual(t, len(page.Events), store.PageLimit(limit))
		for _, e := range page.Events {
			require.Greater(t, e.Seq, after)
			if len(all) > 0 || e.Seq != page.First {
				require.Equal(t, after+1, e.Seq, "dense numbering")
			}
			require.False(t, e.At.IsZero())
			require.Equal(t, time.UTC, e.At.Location())
			after = e.Seq
		}
		all = append(all, page.Events...)
	}
}

// messages returns message of each event.
func messages(t *testing.T, events []store.Event) []string {
	t.Helper()
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = message(t, e)
	}
	return out
}

func testEventsCreate(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	at := t0.Add(-time.Minute)
	task := newTask("c", "alice", t0)
	task.StatusMessage = "starting"
	task.Events = []store.Event{{Seq: 77, At: at, Type: mcptask.EventLog, Data: json.RawMessage(`{"level":"info","message":"a"}`)}, logLine("b")}
	got := mustCreate(t, s, task)
	require.Nil(t, got.Events, "Create returns the task without its events")
	require.Len(t, task.Events, 2, "Create leaves its argument alone")
	require.Nil(t, mustGet(t, s, "c").Events, "reads never fill Events")

	events, page := readLog(t, s, "c", 0)
	require.Equal(t, []string{"a", "b", "status:working"}, messages(t, events))
	require.Equal(t, store.EventPage{Events: events, First: 1, Last: 3}, page)
	require.Equal(t, uint64(1), events[0].Seq, "the store numbers from 1, whatever Seq says")
	require.True(t, events[0].At.Equal(at), "a given At is kept")
	require.True(t, events[1].At.Equal(got.UpdatedAt), "a zero At is the creation's")
	require.JSONEq(t, `{"level":"info","message":"a"}`, string(events[0].Data))
	require.Equal(t, mcptask.StatusEvent{Status: mcptask.StatusWorking, StatusMessage: "starting"}, statusOf(t, events[2]))
	require.True(t, events[2].At.Equal(got.UpdatedAt))

	// A task created ended: its events, then its terminal status, and
	// nothing after it.
	done := newTask("done", "alice", t0)
	done.Status, done.Result = mcptask.StatusCompleted, json.RawMessage(`{"ok":true}`)
	done.Events = []store.Event{{Type: mcptask.EventOutput, Data: json.RawMessage(`{"output":[1,2]}`)}}
	mustCreate(t, s, done)
	events, _ = readLog(t, s, "done", 0)
	require.Equal(t, []string{string(mcptask.EventOutput), "status:completed"}, messages(t, events))
	_, err := s.Update(ctx, "done", store.Update{Events: []store.Event{logLine("late")}})
	require.ErrorIs(t, err, store.ErrTerminal)

	// A task created without events has its first status.
	mustCreate(t, s, newTask("plain", "alice", t0))
	events, _ = readLog(t, s, "plain", 0)
	require.Equal(t, []string{"status:working"}, messages(t, events))

	// Bad events refuse the whole Create.
	for name, ev := range map[string]store.Event{
		"empty type":   {Type: ""},
		"space":        {Type: "a b"},
		"newline":      {Type: "a\nb"},
		"non-ASCII":    {Type: "é"},
		"long type":    {Type: mcptask.EventType(strings.Repeat("t", store.MaxEventTypeBytes+1))},
		"bad JSON":     {Type: mcptask.EventLog, Data: json.RawMessage(`{`)},
		"out of range": {Type: mcptask.EventLog, At: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		bad := newTask("bad", "alice", t0)
		bad.Events = []store.Event{logLine("ok"), ev}
		_, err := s.Create(ctx, bad)
		require.ErrorIs(t, err, store.ErrInvalid, name)
	}
	bad := newTask("bad", "alice", t0)
	bad.Events = []store.Event{{Type: mcptask.EventOutput, Data: jsonString(store.DefaultMaxEventBytes)}}
	_, err = s.Create(ctx, bad)
	require.ErrorIs(t, err, store.ErrTooLarge)
	_, err = s.Events(ctx, "bad", 0, 0)
	require.ErrorIs(t, err, store.ErrNotFound, "a refused Create writes nothing")
}

func testEventsUpdate(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("u", "alice", t0))

	// Events and the status event go with the update, in one write.
	req := store.Event{Type: mcptask.EventInputRequest, Data: json.RawMessage(`{"inputRequests":{"a":{"method":"elicitation/create"}}}`)}
	got := mustUpdate(t, s, "u", store.Update{Status: mcptask.StatusInputRequired, StatusMessage: strPtr("asking"), Events: []store.Event{req}})
	require.Equal(t, uint64(2), got.Version)
	require.Len(t, got.History, 2, "a state update returns the whole task")
	events, _ := readLog(t, s, "u", 0)
	require.Equal(t, []string{"status:working", string(mcptask.EventInputRequest), "status:input_required"}, messages(t, events))
	require.Equal(t, mcptask.StatusEvent{Status: mcptask.StatusInputRequired, StatusMessage: "asking"}, statusOf(t, events[2]))
	require.True(t, events[1].At.Equal(got.UpdatedAt) && events[2].At.Equal(got.UpdatedAt), "at the write's time")

	// No status change, no status event: variables, a message, the same
	// status again.
	mustUpdate(t, s, "u", store.Update{Variables: map[string]json.RawMessage{"v": json.RawMessage(`1`)}})
	mustUpdate(t, s, "u", store.Update{Status: mcptask.StatusInputRequired, StatusMessage: strPtr("still asking")})
	mustUpdate(t, s, "u", store.Update{})
	_, page := readLog(t, s, "u", 0)
	require.Equal(t, uint64(3), page.Last)

	// Every status change has its event; an ended task's last event is
	// its terminal status, and it takes no more.
	mustUpdate(t, s, "u", store.Update{Status: mcptask.StatusWorking})
	mustUpdate(t, s, "u", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`),
		Events: []store.Event{{Type: mcptask.EventStepEnded, Data: json.RawMessage(`{"step":"s","attempt":1,"status":"completed"}`)}}})
	events, page = readLog(t, s, "u", 2)
	require.Equal(t, []string{"status:working", string(mcptask.EventInputRequest), "status:input_required", "status:working",
		string(mcptask.EventStepEnded), "status:completed"}, messages(t, events))
	require.Equal(t, uint64(6), page.Last)
	for _, u := range []store.Update{
		{Events: []store.Event{logLine("late")}},
		{Events: []store.Event{logLine("late")}, Labels: map[string]string{"x": "y"}},
	} {
		_, err := s.Update(ctx, "u", u)
		require.ErrorIs(t, err, store.ErrTerminal)
	}
	_, err := s.Update(ctx, "u", store.Update{Annotate: true, Labels: map[string]string{"x": "y"}, Events: []store.Event{logLine("note")}})
	require.ErrorIs(t, err, store.ErrInvalid, "an annotation carries no events")
	_, page = readLog(t, s, "u", 0)
	require.Equal(t, uint64(6), page.Last, "an ended task's log is kept as it was")
}

// testEventsStatusMessageCut: a status message too long for an event is
// cut short in the status event, never refused.
func testEventsStatusMessageCut(t *testing.T, o opener) {
	s := o.open(t)
	mustCreate(t, s, newTask("m", "alice", t0))
	long := strings.Repeat("é", store.DefaultMaxEventBytes) // twice the bytes of an event
	mustUpdate(t, s, "m", store.Update{Status: mcptask.StatusInputRequired, StatusMessage: &long})
	require.Equal(t, long, mustGet(t, s, "m").StatusMessage, "the task keeps the whole message")
	events, _ := readLog(t, s, "m", 0)
	ev := events[len(events)-1]
	require.LessOrEqual(t, store.EventSize(ev), store.DefaultMaxEventBytes)
	st := statusOf(t, ev)
	require.Equal(t, mcptask.StatusInputRequired, st.Status)
	require.True(t, strings.HasSuffix(st.StatusMessage, "…"))
	require.True(t, strings.HasPrefix(long, strings.TrimSuffix(st.StatusMessage, "…")), "cut between characters")
	require.Greater(t, len(st.StatusMessage), store.DefaultMaxEventBytes/2)
}

// testEventsAppendOnly: a pure append checks like an update, writes the
// events only, bumps no version and returns the header.
func testEventsAppendOnly(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	task := newTask("a", "alice", t0)
	task.LeaseHolder, task.LeaseUntil = "me", t0.Add(time.Hour)
	task.Variables = map[string]json.RawMessage{"big": jsonString(1000)}
	created := mustCreate(t, s, task)
	fence := created.Fence()

	at := t0.Add(time.Second)
	got := mustUpdate(t, s, "a", store.Update{Fence: &fence, IfVersion: 1, Events: []store.Event{logLine("one"), {At: at, Type: mcptask.EventProgress, Data: json.RawMessage(`{"progress":1,"total":4}`)}}})
	require.Equal(t, uint64(1), got.Version, "a pure append bumps no version")
	require.True(t, got.UpdatedAt.Equal(created.UpdatedAt), "nor UpdatedAt")
	require.Equal(t, "alice", got.Owner)
	require.Equal(t, mcptask.StatusWorking, got.Status)
	require.Equal(t, "me", got.LeaseHolder)
	require.Nil(t, got.Variables, "it returns the header")
	require.Nil(t, got.History)
	cur := mustGet(t, s, "a")
	require.Equal(t, uint64(1), cur.Version)
	require.JSONEq(t, string(jsonString(1000)), string(cur.Variables["big"]))
	events, _ := readLog(t, s, "a", 0)
	require.Equal(t, []string{"status:working", "one", string(mcptask.EventProgress)}, messages(t, events))
	require.False(t, events[1].At.IsZero(), "a zero At is the store's time")
	require.True(t, events[2].At.Equal(at))

	// A compare-and-swap writer that read version 1 before the log lines
	// still wins.
	got = mustUpdate(t, s, "a", store.Update{IfVersion: 1, Status: mcptask.StatusInputRequired})
	require.Equal(t, uint64(2), got.Version)

	// Refused appends append nothing.
	for name, c := range map[string]struct {
		id   string
		u    store.Update
		want error
	}{
		"not found": {"nope", store.Update{Events: []store.Event{logLine("x")}}, store.ErrNotFound},
		"fenced":    {"a", store.Update{Fence: &store.Fence{Holder: "other", Epoch: 1}, Events: []store.Event{logLine("x")}}, store.ErrFenced},
		"version":   {"a", store.Update{IfVersion: 1, Events: []store.Event{logLine("x")}}, store.ErrConflict},
		"too large": {"a", store.Update{Events: []store.Event{logLine("x"), {Type: mcptask.EventOutput, Data: jsonString(store.DefaultMaxEventBytes)}}}, store.ErrTooLarge},
		"invalid":   {"a", store.Update{Events: []store.Event{logLine("x"), {Type: "bad type"}}}, store.ErrInvalid},
	} {
		_, err := s.Update(ctx, c.id, c.u)
		require.ErrorIs(t, err, c.want, name)
	}
	_, page := readLog(t, s, "a", 0)
	require.Equal(t, uint64(4), page.Last)

	// An event of exactly the limit fits.
	e := store.Event{Type: mcptask.EventOutput}
	e.Data = jsonString(store.DefaultMaxEventBytes - len(e.Type))
	mustUpdate(t, s, "a", store.Update{Events: []store.Event{e}})
	events, _ = readLog(t, s, "a", 0)
	require.Equal(t, store.DefaultMaxEventBytes, store.EventSize(events[len(events)-1]))
}

// testEventsAtomic: an update refused for any reason appends none of its
// events, and the status event goes only with a committed status change.
func testEventsAtomic(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("x", "alice", t0))
	mustUpdate(t, s, "x", store.Update{Variables: map[string]json.RawMessage{"a": jsonString(store.DefaultMaxVariableBytes)}})
	ev := []store.Event{logLine("never")}
	for name, c := range map[string]struct {
		u    store.Update
		want error
	}{
		"version":        {store.Update{IfVersion: 1, Status: mcptask.StatusInputRequired, Events: ev}, store.ErrConflict},
		"variables full": {store.Update{Status: mcptask.StatusInputRequired, Variables: map[string]json.RawMessage{"b": jsonString(store.DefaultMaxVariableBytes), "c": jsonString(store.DefaultMaxVariableBytes), "d": jsonString(store.DefaultMaxVariableBytes), "e": jsonString(store.DefaultMaxVariableBytes)}, Events: ev}, store.ErrTooLarge},
		"variable size":  {store.Update{Variables: map[string]json.RawMessage{"b": jsonString(store.DefaultMaxVariableBytes + 1)}, Events: ev}, store.ErrTooLarge},
		"fenced":         {store.Update{Fence: &store.Fence{Holder: "h", Epoch: 3}, Status: mcptask.StatusCompleted, Events: ev}, store.ErrFenced},
		"bad status":     {store.Update{Status: "nonsense", Events: ev}, store.ErrInvalidTransition},
	} {
		_, err := s.Update(ctx, "x", c.u)
		require.ErrorIs(t, err, c.want, name)
	}
	task := mustGet(t, s, "x")
	require.Equal(t, uint64(2), task.Version)
	require.Equal(t, mcptask.StatusWorking, task.Status)
	events, _ := readLog(t, s, "x", 0)
	require.Equal(t, []string{"status:working"}, messages(t, events))
}

// testEventsCaps: the log keeps the latest DefaultMaxEvents events and
// DefaultMaxEventLogBytes bytes of them; a read says how many it dropped;
// numbers go on after drops.
func testEventsCaps(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()

	// The count cap, over many appends and in one write.
	mustCreate(t, s, newTask("n", "alice", t0))
	total := 1 // the first status
	for i := range 11 {
		mustUpdate(t, s, "n", store.Update{Events: logLines(fmt.Sprintf("b%d", i), 100)})
		total += 100
	}
	events, page := readLog(t, s, "n", store.MaxPageSize)
	require.Len(t, events, store.DefaultMaxEvents)
	require.Equal(t, uint64(total), page.Last)
	require.Equal(t, uint64(total-store.DefaultMaxEvents+1), page.First)
	require.Equal(t, page.First-1, page.Dropped, "a read from the start reports the dropped ones")
	require.Equal(t, "b10-99", message(t, events[len(events)-1]))
	mid, err := s.Events(ctx, "n", page.First+10, 5)
	require.NoError(t, err)
	require.Zero(t, mid.Dropped, "nothing the reader had not seen was dropped")
	require.Equal(t, page.First+11, mid.Events[0].Seq)
	behind, err := s.Events(ctx, "n", 5, 1)
	require.NoError(t, err)
	require.Equal(t, page.First-6, behind.Dropped)
	require.Equal(t, page.First, behind.Events[0].Seq)

	mustCreate(t, s, newTask("one", "alice", t0))
	mustUpdate(t, s, "one", store.Update{Events: logLines("x", store.DefaultMaxEvents+200)})
	events, page = readLog(t, s, "one", 0)
	require.Len(t, events, store.DefaultMaxEvents)
	require.Equal(t, uint64(store.DefaultMaxEvents+201), page.Last, "numbered all the same")
	require.Equal(t, "x-200", message(t, events[0]), "a write of more events than the cap keeps its latest")

	// The byte cap: 60 KiB outputs, 17 fit in 1 MiB.
	mustCreate(t, s, newTask("b", "alice", t0))
	out := store.Event{Type: mcptask.EventOutput, Data: jsonString(60 << 10)}
	for range 40 {
		mustUpdate(t, s, "b", store.Update{Events: []store.Event{out}})
	}
	events, page = readLog(t, s, "b", 0)
	size := 0
	for _, e := range events {
		size += store.EventSize(e)
	}
	require.LessOrEqual(t, size, store.DefaultMaxEventLogBytes)
	require.Greater(t, size+store.EventSize(out), store.DefaultMaxEventLogBytes, "only what must go is dropped")
	require.Equal(t, uint64(41), page.Last)
	require.Equal(t, page.Last-uint64(len(events))+1, page.First)

	// Numbers go on after drops, and a status change still gets its
	// event.
	got := mustUpdate(t, s, "b", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`)})
	require.Equal(t, uint64(2), got.Version)
	events, page = readLog(t, s, "b", 0)
	require.Equal(t, uint64(42), page.Last)
	require.Equal(t, "status:completed", message(t, events[len(events)-1]))
}

// testEventsRead: pages, limits, reads past the end, missing tasks, and
// copies.
func testEventsRead(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("r", "alice", t0))
	mustUpdate(t, s, "r", store.Update{Events: logLines("l", store.DefaultPageSize+20)})
	last := uint64(store.DefaultPageSize + 21)

	page, err := s.Events(ctx, "r", 0, 0)
	require.NoError(t, err)
	require.Len(t, page.Events, store.DefaultPageSize, "limit 0: the default page size")
	require.Equal(t, uint64(1), page.First)
	require.Equal(t, last, page.Last)
	page, err = s.Events(ctx, "r", 3, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"l-2", "l-3", "l-4", "l-5"}, messages(t, page.Events))
	require.Equal(t, uint64(4), page.Events[0].Seq)
	for _, after := range []uint64{last, last + 1, 1 << 62} {
		page, err = s.Events(ctx, "r", after, 10)
		require.NoError(t, err)
		require.Empty(t, page.Events, "after %d", after)
		require.Equal(t, last, page.Last)
		require.Zero(t, page.Dropped)
	}
	_, err = s.Events(ctx, "missing", 0, 10)
	require.ErrorIs(t, err, store.ErrNotFound)

	// The events returned are copies.
	page, err = s.Events(ctx, "r", 1, 1)
	require.NoError(t, err)
	page.Events[0].Data[0] = 'X'
	page, err = s.Events(ctx, "r", 1, 1)
	require.NoError(t, err)
	require.Equal(t, "l-0", message(t, page.Events[0]))
}

// testEventsDelete: Delete removes the log; a task created again under
// the id starts a log of its own.
func testEventsDelete(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("d", "alice", t0))
	mustUpdate(t, s, "d", store.Update{Events: logLines("x", 30)})
	mustCreate(t, s, newTask("keep", "alice", t0))
	require.NoError(t, s.Delete(ctx, "d"))
	_, err := s.Events(ctx, "d", 0, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Update(ctx, "d", store.Update{Events: []store.Event{logLine("x")}})
	require.ErrorIs(t, err, store.ErrNotFound)
	mustCreate(t, s, newTask("d", "alice", t0))
	events, page := readLog(t, s, "d", 0)
	require.Equal(t, []string{"status:working"}, messages(t, events))
	require.Equal(t, uint64(1), page.First)
	events, _ = readLog(t, s, "keep", 0)
	require.Len(t, events, 1, "another task's log is untouched")
}

// testEventsConcurrent: appenders racing on one task, with state writers
// among them, get dense, unique numbers; each writer's events keep their
// order; a compare-and-swap writer is never made to conflict by an
// append.
func testEventsConcurrent(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	writers, per := 16, 25
	if testing.Short() {
		writers, per = 8, 10
	}
	mustCreate(t, s, newTask("c", "alice", t0))
	var (
		wg   sync.WaitGroup
		errs = make(chan error, writers+1)
		stop = make(chan struct{})
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				u := store.Update{Events: []store.Event{logLine(fmt.Sprintf("w%02d-%03d", w, i))}}
				if i%5 == 4 { // now and then with a variable: a state write
					u.Variables = map[string]json.RawMessage{fmt.Sprintf("w%d", w): json.RawMessage(fmt.Sprint(i))}
				}
				if _, err := s.Update(ctx, "c", u); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// A compare-and-swap writer flipping the status: it conflicts only
	// with the state writes, never with the appends.
	flips := flipStatus(s, "c", per, stop, errs)
	wg.Wait()
	close(stop)
	statusCnt := <-flips
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	events, page := readLog(t, s, "c", store.MaxPageSize)
	want := 1 + writers*per + statusCnt
	require.Len(t, events, want)
	require.Equal(t, uint64(want), page.Last)
	require.Equal(t, uint64(1), page.First)
	next := map[string]int{}
	statuses := 0
	for _, e := range events {
		if e.Type == mcptask.EventStatus {
			statuses++
			continue
		}
		msg := message(t, e)
		w, i, _ := strings.Cut(msg, "-")
		require.Equal(t, fmt.Sprintf("%03d", next[w]), i, "writer %s's events in its order", w)
		next[w]++
	}
	require.Equal(t, 1+statusCnt, statuses, "one status event per committed status change")
	require.Len(t, next, writers)
}

// flipStatus flips task id between working and input_required with
// compare-and-swap updates, at most n times, until stop is closed; it
// sends the number of flips that won on the channel it returns, and the
// first error other than a conflict on errs.
func flipStatus(s store.Store, id string, n int, stop <-chan struct{}, errs chan<- error) <-chan int {
	flips := make(chan int, 1)
	go func() {
		won := 0
		defer func() { flips <- won }()
		ctx := context.Background()
		for range n { // few enough that the log keeps everything
			select {
			case <-stop:
				return
			default:
			}
			cur, err := s.Get(ctx, id)
			if err != nil {
				errs <- err
				return
			}
			next := mcptask.StatusInputRequired
			if cur.Status == next {
				next = mcptask.StatusWorking
			}
			_, err = s.Update(ctx, id, store.Update{IfVersion: cur.Version, Status: next})
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrConflict):
				errs <- err
				return
			}
		}
	}()
	return flips
}

// testReopenEvents: a durable store keeps every task's log across a
// reopen, numbering included (after drops too), and goes on from it.
func testReopenEvents(t *testing.T, open func(t *testing.T, path string) store.Store) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s := openAt(t, open, path)
	ctx := t.Context()
	task := newTask("e", "alice", t0)
	task.Events = []store.Event{logLine("created"), {Type: mcptask.EventOutput}} // one without data
	mustCreate(t, s, task)
	mustUpdate(t, s, "e", store.Update{Events: logLines("x", store.DefaultMaxEvents+50)})
	mustCreate(t, s, newTask("f", "alice", t0))
	mustUpdate(t, s, "f", store.Update{Status: mcptask.StatusFailed, Error: &mcptask.ErrorInfo{Code: 1, Message: "m"}})
	mustCreate(t, s, newTask("gone", "alice", t0))
	require.NoError(t, s.Delete(ctx, "gone"))
	beforeE, pageE := readLog(t, s, "e", store.MaxPageSize)
	beforeF, pageF := readLog(t, s, "f", 0)
	require.Greater(t, pageE.First, uint64(1))
	require.NoError(t, s.Close())

	s2 := openAt(t, open, path)
	afterE, againE := readLog(t, s2, "e", store.MaxPageSize)
	afterF, againF := readLog(t, s2, "f", 0)
	require.Equal(t, pageE, againE)
	require.Equal(t, beforeE, afterE)
	require.Equal(t, pageF, againF)
	require.Equal(t, beforeF, afterF)
	_, err := s2.Events(ctx, "gone", 0, 0)
	require.ErrorIs(t, err, store.ErrNotFound)

	// Numbers go on from the last, for appends and status events.
	mustUpdate(t, s2, "e", store.Update{Events: []store.Event{logLine("after")}})
	mustUpdate(t, s2, "e", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`)})
	page, err := s2.Events(ctx, "e", pageE.Last, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"after", "status:completed"}, messages(t, page.Events))
	require.Equal(t, pageE.Last+1, page.Events[0].Seq)
	require.Equal(t, pageE.First+2, page.First, "the caps go on dropping the oldest")
	require.NoError(t, s2.Delete(ctx, "e"))
	_, err = s2.Events(ctx, "e", 0, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
}
