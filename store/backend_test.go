package store

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
)

func TestLimitsWithDefaults(t *testing.T) {
	require.Equal(t, Limits{
		MaxVariableBytes:  DefaultMaxVariableBytes,
		MaxVariablesBytes: DefaultMaxVariablesBytes,
		MaxResultBytes:    DefaultMaxResultBytes,
		MaxArgumentsBytes: DefaultMaxArgumentsBytes,
		MaxEventBytes:     DefaultMaxEventBytes,
		MaxEvents:         DefaultMaxEvents,
		MaxEventLogBytes:  DefaultMaxEventLogBytes,
	}, Limits{}.WithDefaults())
	require.Equal(t, Limits{
		MaxVariableBytes:  1,
		MaxVariablesBytes: DefaultMaxVariablesBytes,
		MaxResultBytes:    3,
		MaxArgumentsBytes: DefaultMaxArgumentsBytes,
		MaxEventBytes:     1000,
		MaxEvents:         2,
		MaxEventLogBytes:  5000,
	}, Limits{MaxVariableBytes: 1, MaxVariablesBytes: -2, MaxResultBytes: 3, MaxEventBytes: 1000, MaxEvents: 2, MaxEventLogBytes: 5000}.WithDefaults())
	// An event holds at least the store's status event; the log at least
	// one event of the largest size.
	l := Limits{MaxEventBytes: 10, MaxEventLogBytes: 20}.WithDefaults()
	require.Equal(t, MinEventBytes, l.MaxEventBytes)
	require.Equal(t, MinEventBytes, l.MaxEventLogBytes)
	l = Limits{MaxEventLogBytes: 1000}.WithDefaults()
	require.Equal(t, DefaultMaxEventBytes, l.MaxEventBytes)
	require.Equal(t, DefaultMaxEventBytes, l.MaxEventLogBytes)
}

func TestHelpers(t *testing.T) {
	for _, v := range []string{"null", " null", "null\n", "\t\r\n null \n"} {
		require.True(t, IsJSONNull(json.RawMessage(v)), "%q", v)
	}
	for _, v := range []string{"", "nul", `"null"`, "[null]", "null null", "Null"} {
		require.False(t, IsJSONNull(json.RawMessage(v)), "%q", v)
	}
	require.Equal(t, DefaultPageSize, PageLimit(0))
	require.Equal(t, DefaultPageSize, PageLimit(-3))
	require.Equal(t, 7, PageLimit(7))
	require.Equal(t, MaxPageSize, PageLimit(MaxPageSize+1))
	require.True(t, ValidTime(time.Unix(0, 0)))
	require.True(t, ValidTime(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.False(t, ValidTime(time.Time{}))
	require.False(t, ValidTime(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.Equal(t, 6, VariablesSize(map[string]json.RawMessage{"a": json.RawMessage(`1`), "bc": json.RawMessage(`""`)}))
}

func TestApplyUpdateLeavesTaskOnError(t *testing.T) {
	now := time.Unix(100, 0)
	base := &Task{ID: "a", Owner: "o", Status: mcptask.StatusWorking, Version: 3,
		Variables: map[string]json.RawMessage{"x": json.RawMessage(`1`)}, Labels: map[string]string{"l": "v"}}
	for name, u := range map[string]Update{
		"conflict":   {IfVersion: 2, Status: mcptask.StatusCompleted, Variables: map[string]json.RawMessage{"x": json.RawMessage(`null`)}},
		"transition": {Status: "nope", Labels: map[string]string{"l": ""}},
		"too large":  {Variables: map[string]json.RawMessage{"y": json.RawMessage(`"` + string(make([]byte, 10)) + `"`)}},
	} {
		task := base.Clone()
		_, err := ApplyUpdate(task, u, Limits{MaxVariablesBytes: 5, MaxVariableBytes: 100}, now)
		require.Error(t, err, name)
		require.Equal(t, base, task, name)
	}
	task := base.Clone()
	ch, err := ApplyUpdate(task, Update{
		IfVersion: 3, Status: mcptask.StatusCompleted,
		Variables: map[string]json.RawMessage{"x": json.RawMessage(` null `), "z": json.RawMessage(`2`), "gone": json.RawMessage(`null`)},
		Result:    json.RawMessage(`{}`),
	}, Limits{}, now)
	require.NoError(t, err)
	require.Equal(t, Changes{PrevStatus: mcptask.StatusWorking, SetVariables: []string{"z"}, DeletedVariables: []string{"x"}, ResultChanged: true, StatusChanged: true,
		Events: []Event{{At: now.UTC(), Type: mcptask.EventStatus, Data: json.RawMessage(`{"status":"completed"}`)}}}, ch)
	require.Equal(t, uint64(4), task.Version)
	require.Equal(t, []StatusChange{{Status: mcptask.StatusCompleted, At: now.UTC()}}, task.History)
	require.Equal(t, now.UTC(), task.UpdatedAt)
	require.Equal(t, map[string]json.RawMessage{"z": json.RawMessage(`2`)}, task.Variables)
}

func TestApplyFenceAndLease(t *testing.T) {
	now := time.Unix(100, 0).UTC()
	until := now.Add(time.Minute)
	base := &Task{ID: "a", Owner: "o", Status: mcptask.StatusWorking, Version: 5, LeaseHolder: "h", LeaseEpoch: 3, LeaseUntil: until}

	// Check order: fence first, then terminal, then version.
	ended := base.Clone()
	ended.Status, ended.LeaseHolder, ended.LeaseUntil = mcptask.StatusFailed, "", time.Time{}
	for _, f := range []Fence{{Holder: "x", Epoch: 9}, base.Fence()} {
		_, err := ApplyUpdate(ended, Update{Fence: &f, IfVersion: 1}, Limits{}, now)
		require.ErrorIs(t, err, ErrFenced, "a fenced write to an ended task: %+v", f)
		require.NotErrorIs(t, err, ErrTerminal)
	}
	_, err := ApplyUpdate(ended, Update{IfVersion: 1}, Limits{}, now)
	require.ErrorIs(t, err, ErrTerminal, "without a fence, the terminal status comes before the version")
	require.NotErrorIs(t, err, ErrConflict)
	_, err = ApplyUpdate(base.Clone(), Update{Fence: &Fence{Holder: "x", Epoch: 9}, Status: "nope"}, Limits{}, now)
	require.ErrorIs(t, err, ErrFenced, "the fence comes before the transition")
	for _, f := range []Fence{{"h", 2}, {"h", 4}, {"g", 3}, {"", 0}} {
		task := base.Clone()
		_, err := ApplyUpdate(task, Update{Fence: &f, IfVersion: 1, Status: mcptask.StatusCompleted}, Limits{}, now)
		require.ErrorIs(t, err, ErrFenced, "%+v", f)
		require.NotErrorIs(t, err, ErrConflict)
		require.Equal(t, base, task)
	}
	task := base.Clone()
	_, err = ApplyUpdate(task, Update{Fence: &Fence{"h", 3}, IfVersion: 4}, Limits{}, now)
	require.ErrorIs(t, err, ErrConflict, "a matching fence still checks the version")

	// Release keeps the epoch.
	task = base.Clone()
	ch, err := ApplyUpdate(task, Update{Fence: &Fence{"h", 3}, ReleaseLease: true}, Limits{}, now)
	require.NoError(t, err)
	require.True(t, ch.LeaseChanged)
	require.Equal(t, "h", ch.PrevLeaseHolder)
	require.Equal(t, until, ch.PrevLeaseUntil)
	require.Empty(t, task.LeaseHolder)
	require.True(t, task.LeaseUntil.IsZero())
	require.Equal(t, uint64(3), task.LeaseEpoch)
	require.False(t, ch.StatusChanged)
	require.Nil(t, task.History)

	// A terminal status releases the lease too.
	task = base.Clone()
	ch, err = ApplyUpdate(task, Update{Status: mcptask.StatusCancelled}, Limits{}, now)
	require.NoError(t, err)
	require.True(t, ch.LeaseChanged)
	require.Empty(t, task.LeaseHolder)
	require.Equal(t, uint64(3), task.LeaseEpoch)

	// An update that leaves the status and the lease alone changes neither.
	task = base.Clone()
	ch, err = ApplyUpdate(task, Update{Status: mcptask.StatusWorking}, Limits{}, now)
	require.NoError(t, err)
	require.False(t, ch.LeaseChanged)
	require.False(t, ch.StatusChanged, "working -> working is not a change")
	require.Equal(t, "h", task.LeaseHolder)
}

func TestClaimAndRenew(t *testing.T) {
	now := time.Unix(1000, 0).UTC()
	require.ErrorIs(t, CheckClaim("", now, now.Add(time.Second)), ErrInvalid)
	require.ErrorIs(t, CheckClaim(string(make([]byte, MaxHolderBytes+1)), now, now.Add(time.Second)), ErrInvalid)
	require.ErrorIs(t, CheckClaim("h", now, now), ErrInvalid, "until must be after now")
	require.ErrorIs(t, CheckClaim("h", time.Time{}, now), ErrInvalid)
	require.ErrorIs(t, CheckClaim("h", now, time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)), ErrInvalid)
	require.NoError(t, CheckClaim("h", now, now.Add(time.Second)))
	require.ErrorIs(t, CheckRenew("", now), ErrInvalid)
	require.ErrorIs(t, CheckRenew("h", time.Time{}), ErrInvalid)

	free := &Task{ID: "a", Status: mcptask.StatusWorking, Version: 2, UpdatedAt: now.Add(-time.Hour)}
	ch, err := ApplyClaim(free, "h1", now, now.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, ch.LeaseChanged)
	require.Empty(t, ch.PrevLeaseHolder)
	require.Equal(t, "h1", free.LeaseHolder)
	require.Equal(t, uint64(1), free.LeaseEpoch)
	require.Equal(t, uint64(3), free.Version)
	require.Equal(t, now.Add(-time.Hour), free.UpdatedAt, "a claim leaves UpdatedAt")

	held := free.Clone()
	_, err = ApplyClaim(held, "h2", now.Add(time.Minute-1), now.Add(time.Hour))
	require.ErrorIs(t, err, ErrLeased)
	require.Equal(t, free, held)
	_, err = ApplyClaim(held, "h2", now.Add(time.Minute), now.Add(time.Hour))
	require.NoError(t, err, "a lease that ends at now is expired")
	require.Equal(t, uint64(2), held.LeaseEpoch)
	again := held.Clone()
	_, err = ApplyClaim(again, "h2", now, now.Add(2*time.Hour))
	require.NoError(t, err, "the holder may re-claim its valid lease")
	require.Equal(t, uint64(3), again.LeaseEpoch)

	done := &Task{ID: "d", Status: mcptask.StatusCompleted}
	_, err = ApplyClaim(done, "h", now, now.Add(time.Second))
	require.ErrorIs(t, err, ErrTerminal)

	r := held.Clone()
	_, ok := ApplyRenew(r, "h1", now.Add(time.Hour))
	require.False(t, ok, "h1 lost the lease")
	ch, ok = ApplyRenew(r, "h2", now.Add(3*time.Hour))
	require.True(t, ok)
	require.True(t, ch.LeaseChanged)
	require.Equal(t, held.LeaseUntil, ch.PrevLeaseUntil)
	require.Equal(t, held.Version, r.Version, "renew does not bump the version")
	require.Equal(t, now.Add(3*time.Hour), r.LeaseUntil)
	_, ok = ApplyRenew(&Task{Status: mcptask.StatusWorking}, "", now)
	require.False(t, ok)
}

func TestAppendHistory(t *testing.T) {
	var h []StatusChange
	for i := range 100 {
		prev := h
		h = AppendHistory(h, StatusChange{Message: strconv.Itoa(i)})
		require.LessOrEqual(t, len(h), MaxStatusHistory)
		require.Equal(t, "0", h[0].Message, "the first entry stays")
		require.Equal(t, strconv.Itoa(i), h[len(h)-1].Message)
		if len(prev) > 0 {
			require.Equal(t, "0", prev[0].Message, "the previous slice is untouched")
			require.Equal(t, strconv.Itoa(i-1), prev[len(prev)-1].Message)
		}
	}
	require.Len(t, h, MaxStatusHistory)
	require.Equal(t, strconv.Itoa(100-MaxStatusHistory+1), h[1].Message, "the oldest later entries went first")
}

func TestPrepareCreateLeaseAndHistory(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.FixedZone("Z", 3600))
	in := &Task{ID: "a", Owner: "o", Status: mcptask.StatusInputRequired, StatusMessage: "m", CreatedAt: at,
		LeaseEpoch: 7, LeaseUntil: at.Add(time.Hour), History: []StatusChange{{Status: mcptask.StatusFailed}}}
	c, err := PrepareCreate(in, Limits{})
	require.NoError(t, err)
	require.Zero(t, c.LeaseEpoch, "no holder, no epoch")
	require.True(t, c.LeaseUntil.IsZero())
	require.Equal(t, []StatusChange{{Status: mcptask.StatusInputRequired, Message: "m", At: at.UTC()}}, c.History)

	in.LeaseHolder = "h"
	c, err = PrepareCreate(in, Limits{})
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.LeaseEpoch)
	require.Equal(t, at.Add(time.Hour).UTC(), c.LeaseUntil)
	require.Equal(t, time.UTC, c.LeaseUntil.Location())

	for name, mutate := range map[string]func(*Task){
		"holder without until": func(x *Task) { x.LeaseUntil = time.Time{} },
		"holder too long":      func(x *Task) { x.LeaseHolder = string(make([]byte, MaxHolderBytes+1)) },
		"until out of range":   func(x *Task) { x.LeaseUntil = time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC) },
		"name too long":        func(x *Task) { x.Request.Name = string(make([]byte, MaxNameBytes+1)) },
	} {
		x := in.Clone()
		mutate(x)
		_, err := PrepareCreate(x, Limits{})
		require.ErrorIs(t, err, ErrInvalid, name)
	}
}

func TestNormalizeAndPlanQuery(t *testing.T) {
	q, err := NormalizeQuery(Query{Statuses: []mcptask.Status{mcptask.StatusFailed, mcptask.StatusWorking, mcptask.StatusFailed}, Limit: -1})
	require.NoError(t, err)
	require.Equal(t, []mcptask.Status{mcptask.StatusFailed, mcptask.StatusWorking}, q.Statuses)
	require.Equal(t, DefaultPageSize, q.Limit)
	q, err = NormalizeQuery(Query{Statuses: []mcptask.Status{}, Limit: MaxPageSize * 2})
	require.NoError(t, err)
	require.Nil(t, q.Statuses)
	require.Equal(t, MaxPageSize, q.Limit)
	for _, bad := range []Query{
		{Statuses: []mcptask.Status{"sleeping"}},
		{Owner: string(make([]byte, MaxOwnerBytes+1))},
		{Name: string(make([]byte, MaxNameBytes+1))},
	} {
		_, err := NormalizeQuery(bad)
		require.ErrorIs(t, err, ErrInvalid)
	}

	require.Equal(t, MinQueryScan, QueryScanBudget(0))
	require.Equal(t, 10*MaxPageSize, QueryScanBudget(MaxPageSize))

	task := &Task{Owner: "o", Status: mcptask.StatusWorking, Request: Request{Name: "n"}}
	require.True(t, Query{}.Match(task))
	require.True(t, Query{Owner: "o", Name: "n", Statuses: []mcptask.Status{mcptask.StatusFailed, mcptask.StatusWorking}}.Match(task))
	require.False(t, Query{Owner: "p"}.Match(task))
	require.False(t, Query{Name: "m"}.Match(task))
	require.False(t, Query{Statuses: []mcptask.Status{mcptask.StatusFailed}}.Match(task))

	few := map[mcptask.Status]int{mcptask.StatusInputRequired: 3, mcptask.StatusCompleted: 1 << 20}
	for _, tc := range []struct {
		q    Query
		want QueryIndex
	}{
		{Query{}, ByStatus},
		{Query{Statuses: []mcptask.Status{mcptask.StatusCompleted}}, ByStatus},
		{Query{Owner: "o"}, ByOwner},
		{Query{Name: "n"}, ByName},
		{Query{Owner: "o", Name: "n"}, ByOwner},
		{Query{Owner: "o", Statuses: []mcptask.Status{mcptask.StatusCompleted}}, ByOwner},
		{Query{Owner: "o", Statuses: []mcptask.Status{mcptask.StatusInputRequired}}, ByStatus},
		{Query{Name: "n", Statuses: []mcptask.Status{mcptask.StatusInputRequired}}, ByStatus},
	} {
		require.Equal(t, tc.want, PlanQuery(tc.q, few), "%+v", tc.q)
	}
	require.Equal(t, ByOwner, PlanQuery(Query{Owner: "o", Statuses: []mcptask.Status{mcptask.StatusInputRequired}}, nil), "unknown counts")
	require.Equal(t, map[mcptask.Status]int{mcptask.StatusWorking: 0, mcptask.StatusInputRequired: 0, mcptask.StatusCompleted: 0, mcptask.StatusFailed: 0, mcptask.StatusCancelled: 0}, NewCounts())
}

func TestIsShared(t *testing.T) {
	require.False(t, IsShared(nil))
}

func TestWakeAt(t *testing.T) {
	now := time.Unix(100, 0).UTC()
	zone := time.FixedZone("Z", 3600)
	wake := time.Date(2030, 1, 1, 0, 0, 0, 5, zone)
	in := &Task{ID: "a", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now, WakeAt: wake}
	c, err := PrepareCreate(in, Limits{})
	require.NoError(t, err)
	require.Equal(t, wake.UTC(), c.WakeAt, "stored as given, in UTC")
	require.Equal(t, zone, in.WakeAt.Location(), "the argument is left alone")
	for name, mutate := range map[string]func(*Task){
		"out of range": func(x *Task) { x.WakeAt = time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC) },
		"ended":        func(x *Task) { x.Status, x.Result = mcptask.StatusCompleted, []byte(`1`) },
	} {
		x := in.Clone()
		mutate(x)
		_, err := PrepareCreate(x, Limits{})
		require.ErrorIs(t, err, ErrInvalid, name)
	}
	far := time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = PrepareUpdate(Update{WakeAt: &far}, Limits{})
	require.ErrorIs(t, err, ErrInvalid)

	at := func(d time.Duration) *time.Time { x := now.Add(d).In(zone); return &x }
	task := c.Clone()
	ch, err := ApplyUpdate(task, Update{WakeAt: at(time.Minute)}, Limits{}, now)
	require.NoError(t, err)
	require.True(t, ch.WakeChanged)
	require.Equal(t, wake.UTC(), ch.PrevWakeAt)
	require.Equal(t, now.Add(time.Minute), task.WakeAt)
	require.Equal(t, time.UTC, task.WakeAt.Location())

	ch, err = ApplyUpdate(task, Update{WakeAt: at(time.Minute), StatusMessage: new(string)}, Limits{}, now)
	require.NoError(t, err)
	require.False(t, ch.WakeChanged, "the same time is no change")
	ch, err = ApplyUpdate(task, Update{Status: mcptask.StatusInputRequired}, Limits{}, now)
	require.NoError(t, err)
	require.False(t, ch.WakeChanged, "an update without WakeAt keeps it")
	require.Equal(t, now.Add(time.Minute), task.WakeAt)

	_, err = ApplyClaim(task, "h", now, now.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, now.Add(time.Minute), task.WakeAt, "a claim keeps it")

	cleared := task.Clone()
	ch, err = ApplyUpdate(cleared, Update{WakeAt: &time.Time{}}, Limits{}, now)
	require.NoError(t, err)
	require.True(t, ch.WakeChanged)
	require.Equal(t, now.Add(time.Minute), ch.PrevWakeAt)
	require.True(t, cleared.WakeAt.IsZero())

	// A terminal move clears it and reports the change, even when the
	// same update asks for a wake-up.
	for _, u := range []Update{{Status: mcptask.StatusCompleted}, {Status: mcptask.StatusFailed, WakeAt: at(time.Hour)}} {
		ended := task.Clone()
		ch, err = ApplyUpdate(ended, u, Limits{}, now)
		require.NoError(t, err)
		require.True(t, ch.WakeChanged)
		require.Equal(t, now.Add(time.Minute), ch.PrevWakeAt)
		require.True(t, ended.WakeAt.IsZero())
	}
	// A rejected update leaves it.
	rejected := task.Clone()
	_, err = ApplyUpdate(rejected, Update{IfVersion: 1, WakeAt: at(time.Hour)}, Limits{}, now)
	require.ErrorIs(t, err, ErrConflict)
	require.Equal(t, task, rejected)
}
