package store

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
)

func TestPlanAppend(t *testing.T) {
	lim := Limits{MaxEvents: 3, MaxEventBytes: MinEventBytes, MaxEventLogBytes: 300}.WithDefaults()
	ev := func(n int) Event { return Event{Type: "t", Data: json.RawMessage(strings.Repeat("1", n-1))} }

	// An empty log: numbered from 1, placed end to end, nothing dropped.
	p := lim.PlanAppend(0, 0, []Event{ev(10), ev(20)})
	require.Equal(t, uint64(2), p.Last)
	require.Equal(t, int64(30), p.End)
	require.Len(t, p.Events, 2)
	require.Equal(t, LoggedEvent{Event: Event{Seq: 1, Type: "t", Data: ev(10).Data}, Pos: 0}, p.Events[0])
	require.Equal(t, uint64(2), p.Events[1].Seq)
	require.Equal(t, int64(10), p.Events[1].Pos)
	require.Equal(t, int64(30), p.Events[1].End())
	require.False(t, p.Dropped(p.Events[0]))

	// The count cap: three kept.
	p = lim.PlanAppend(2, 30, []Event{ev(10), ev(10)})
	require.Equal(t, uint64(2), p.DropSeq)
	require.True(t, p.Dropped(LoggedEvent{Event: Event{Seq: 1}, Pos: 0}))
	require.False(t, p.Dropped(LoggedEvent{Event: Event{Seq: 2}, Pos: 10}))
	require.Len(t, p.Events, 2)

	// The byte cap: 300 bytes kept, the oldest go by Pos.
	p = lim.PlanAppend(10, 1000, []Event{ev(100)})
	require.Equal(t, int64(800), p.DropPos)
	require.True(t, p.Dropped(LoggedEvent{Event: Event{Seq: 10}, Pos: 799}))
	require.False(t, p.Dropped(LoggedEvent{Event: Event{Seq: 10}, Pos: 800}))

	// A write of more than the cap keeps its latest, numbered all the same.
	p = lim.PlanAppend(5, 50, []Event{ev(1), ev(1), ev(1), ev(1), ev(1)})
	require.Equal(t, uint64(10), p.Last)
	require.Equal(t, []uint64{8, 9, 10}, []uint64{p.Events[0].Seq, p.Events[1].Seq, p.Events[2].Seq})
	require.Equal(t, int64(52), p.Events[0].Pos)
}

func TestStatusEventCut(t *testing.T) {
	lim := Limits{}.WithDefaults()
	task := &Task{Status: mcptask.StatusWorking, StatusMessage: "short", UpdatedAt: time.Unix(5, 0).UTC()}
	e := statusEvent(task, lim)
	require.Equal(t, Event{At: task.UpdatedAt, Type: mcptask.EventStatus, Data: json.RawMessage(`{"status":"working","statusMessage":"short"}`)}, e)

	lim.MaxEventBytes = MinEventBytes
	for _, msg := range []string{
		strings.Repeat("a", 1000),
		strings.Repeat("é", 1000),
		strings.Repeat("\x01", 1000), // six bytes of JSON each
		strings.Repeat("\xff", 1000), // invalid UTF-8: three bytes each, as U+FFFD
	} {
		task.StatusMessage = msg
		e := statusEvent(task, lim)
		require.LessOrEqual(t, EventSize(e), MinEventBytes)
		var st mcptask.StatusEvent
		require.NoError(t, json.Unmarshal(e.Data, &st))
		require.Equal(t, mcptask.StatusWorking, st.Status)
		require.True(t, strings.HasSuffix(st.StatusMessage, "…"), "%q", st.StatusMessage)
		require.True(t, utf8.ValidString(st.StatusMessage))
		require.Greater(t, EventSize(e), MinEventBytes-12, "the longest cut that fits")
	}
	require.Equal(t, "ab", cutString("abc", 2))
	require.Equal(t, "a", cutString("aé", 2), "not inside a character")
	require.Equal(t, "", cutString("abc", -1))
	require.Equal(t, "abc", cutString("abc", 5))
}

func TestNewEventPage(t *testing.T) {
	require.Equal(t, EventPage{First: 5, Last: 9, Dropped: 4}, NewEventPage(0, 5, 9, nil))
	require.Equal(t, EventPage{First: 5, Last: 9}, NewEventPage(4, 5, 9, nil))
	require.Equal(t, EventPage{First: 5, Last: 9}, NewEventPage(7, 5, 9, nil))
	require.Equal(t, EventPage{}, NewEventPage(3, 0, 0, nil))
}

func TestAppendOnly(t *testing.T) {
	ev := []Event{{Type: "log"}}
	require.True(t, Update{Events: ev}.AppendOnly())
	require.True(t, Update{Events: ev, Fence: &Fence{}, IfVersion: 3}.AppendOnly())
	require.False(t, Update{}.AppendOnly())
	msg := ""
	for _, u := range []Update{
		{Events: ev, Status: mcptask.StatusWorking}, {Events: ev, StatusMessage: &msg}, {Events: ev, Variables: map[string]json.RawMessage{}},
		{Events: ev, Result: json.RawMessage(`1`)}, {Events: ev, Error: &mcptask.ErrorInfo{}}, {Events: ev, Labels: map[string]string{}},
		{Events: ev, ExpiresAt: &time.Time{}}, {Events: ev, WakeAt: &time.Time{}}, {Events: ev, ReleaseLease: true},
		{Events: ev, Annotate: true},
	} {
		require.False(t, u.AppendOnly(), "%+v", u)
	}
}
