package postgres

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The tasks' event logs: table task_events (migration 3), one row per
// event kept, (task_id, seq) its primary key. An append inserts the new
// rows and deletes the oldest the caps drop, in the transaction of the
// write it reports; a pure append writes no other row (the task row is
// only locked, to number the events in commit order).

// scanTail reads one task with the tail of its log (getTail, headerTail):
// the Seq and End of its newest event, 0 and 0 when it has none.
func scanTail(q pgx.Row, full bool) (t *store.Task, last uint64, end int64, err error) {
	var (
		r         row
		seq, endP *int64
	)
	if err := q.Scan(append(r.dest(full), &seq, &endP)...); err != nil {
		return nil, 0, 0, err
	}
	if t, err = r.task(full); err != nil {
		return nil, 0, 0, err
	}
	if seq != nil && endP != nil {
		last, end = uint64(*seq), *endP
	}
	return t, last, end, nil
}

// queueAppend queues the statements that carry out plan for task id: the
// insert of its events, and the delete of the stored events it drops
// (only once the log may hold some: before that nothing can be below
// either bound).
func (s *Store) queueAppend(b *pgx.Batch, id string, plan store.AppendPlan) {
	if len(plan.Events) == 1 { // the usual case, without arrays to encode
		e := plan.Events[0]
		b.Queue(s.sql.insertEvent, []byte(id), int64(e.Seq), e.Pos, e.At.UnixNano(), string(e.Type), []byte(e.Data))
	} else if n := len(plan.Events); n > 1 {
		seqs, poss, ats := make([]int64, n), make([]int64, n), make([]int64, n)
		types, data := make([]string, n), make([][]byte, n)
		for i, e := range plan.Events {
			seqs[i], poss[i], ats[i] = int64(e.Seq), e.Pos, e.At.UnixNano()
			types[i], data[i] = string(e.Type), e.Data
		}
		b.Queue(s.sql.insertEvents, []byte(id), seqs, poss, ats, types, data)
	}
	if plan.DropSeq > 1 || plan.DropPos > 0 {
		b.Queue(s.sql.dropEvents, []byte(id), int64(plan.DropSeq), plan.DropPos)
	}
}

// Events reads a task's event log in one statement; see store.Store.
func (s *Store) Events(ctx context.Context, id string, after uint64, limit int) (store.EventPage, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return store.EventPage{}, err
	}
	// Seq is a bigint: an after beyond it is past every event.
	from := int64(min(after, 1<<63-1))
	rows, err := s.pool.Query(ctx, s.sql.events, []byte(id), from, store.PageLimit(limit))
	if err != nil {
		return store.EventPage{}, s.fail("events "+id, err)
	}
	defer rows.Close()
	var (
		first, last *int64
		events      []store.Event
		found       bool
	)
	for rows.Next() {
		found = true
		var (
			seq, at *int64
			typ     *string
			data    []byte
		)
		if err := rows.Scan(&first, &last, &seq, &at, &typ, &data); err != nil {
			return store.EventPage{}, s.fail("events "+id, err)
		}
		if seq == nil { // no event after after: the one row of the task
			continue
		}
		e := store.Event{Seq: uint64(*seq), At: nanos(*at), Type: mcptask.EventType(*typ)}
		if data != nil {
			e.Data = json.RawMessage(data)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return store.EventPage{}, s.fail("events "+id, err)
	}
	if !found {
		return store.EventPage{}, notFound(id)
	}
	var f, l uint64
	if first != nil && last != nil {
		f, l = uint64(*first), uint64(*last)
	}
	return store.NewEventPage(after, f, l, events), nil
}

// SubscribeEvents is Subscribe that also delivers the event appends; see
// store.EventNotifier. Its connection LISTENs on the events channel too.
func (s *Store) SubscribeEvents(ctx context.Context, fn func(store.Change)) (stop func(), err error) {
	return s.subscribe(ctx, fn, true)
}

// eventRecord is the notification of an append to task id's log, whose
// newest event is now last: "last|hex(id)", sent on the events channel.
func eventRecord(id string, last uint64) string {
	return strconv.FormatUint(last, 10) + "|" + hex.EncodeToString([]byte(id))
}

// parseEventRecord reads one record of an events channel payload.
func parseEventRecord(p string) (store.Change, error) {
	seq, idHex, ok := strings.Cut(p, "|")
	if !ok {
		return store.Change{}, fmt.Errorf("event payload %q", p)
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err == nil && n == 0 {
		err = errors.New("sequence number 0")
	}
	if err != nil {
		return store.Change{}, fmt.Errorf("event payload %q: %w", p, err)
	}
	id, err := hex.DecodeString(idHex)
	if err != nil {
		return store.Change{}, fmt.Errorf("event payload %q: %w", p, err)
	}
	return store.Change{ID: string(id), Events: n}, nil
}
