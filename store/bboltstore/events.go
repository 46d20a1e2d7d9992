package bboltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The task event logs (schema 4): one flat bucket, every task's events
// under its id, in Seq order:
//
//	events  len(id) (2 bytes) | id | seq (8) -> eventFormat | pos (uvarint)
//	        | at (varint nanos) | type (str) | data (optBytes)
//
// A task's newest event gives its log's Last and End (store.LoggedEvent),
// so no other record is kept: an append seeks the task's last key, puts
// the new events after it, and deletes the oldest the caps drop, touching
// neither the header nor the variables nor the result. A task without
// events (every task of an older file) has no keys: an empty log.

const eventFormat byte = 1

// eventPrefix is the key prefix of task id's events (the form of
// ownerPrefix: ids are at most store.MaxIDBytes long).
func eventPrefix(id string) []byte { return ownerPrefix(id) }

func eventKey(prefix []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(prefix), seq)
}

func encodeEvent(e store.LoggedEvent) []byte {
	enc := encoder{b: make([]byte, 0, 24+len(e.Type)+len(e.Data))}
	enc.byte(eventFormat)
	enc.uvarint(uint64(e.Pos))
	enc.varint(e.At.UnixNano())
	enc.str(string(e.Type))
	enc.optBytes(e.Data)
	return enc.b
}

// decodeEvent reads an event record; seq comes from its key.
func decodeEvent(seq uint64, v []byte) (store.LoggedEvent, error) {
	d := decoder{b: v}
	if d.byte() != eventFormat {
		return store.LoggedEvent{}, fmt.Errorf("%w: unknown event format", errCorrupt)
	}
	var e store.LoggedEvent
	e.Seq = seq
	e.Pos = int64(d.uvarint())
	e.At = timeOrZero(d.varint(), true)
	e.Type = mcptask.EventType(d.str())
	if data := d.optBytes(); data != nil {
		e.Data = json.RawMessage(data)
	}
	return e, d.done()
}

// eventSeq returns the Seq of an events key under prefix, and false when
// the key is not one of prefix's (or is malformed).
func eventSeq(prefix, k []byte) (uint64, bool) {
	if len(k) != len(prefix)+8 || !bytes.HasPrefix(k, prefix) {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(prefix):]), true
}

// logTail returns the Seq and End of task id's newest event, 0 and 0 when
// it has none.
func logTail(b *bolt.Bucket, prefix []byte) (last uint64, end int64, err error) {
	c := b.Cursor()
	k, _ := c.Seek(eventKey(prefix, ^uint64(0)))
	if k == nil {
		k, _ = c.Last()
	} else if seq, ok := eventSeq(prefix, k); !ok || seq != ^uint64(0) {
		k, _ = c.Prev()
	}
	seq, ok := eventSeq(prefix, k)
	if !ok {
		return 0, 0, nil
	}
	e, err := decodeEvent(seq, c.Bucket().Get(k))
	if err != nil {
		return 0, 0, fmt.Errorf("event %d: %w", seq, err)
	}
	return e.Seq, e.End(), nil
}

// walkEvents calls fn with the key and the event of each of task id's
// events from Seq from on, in order, while fn returns true.
func walkEvents(b *bolt.Bucket, id string, from uint64, fn func(k []byte, e store.LoggedEvent) bool) error {
	prefix := eventPrefix(id)
	c := b.Cursor()
	for k, v := c.Seek(eventKey(prefix, from)); k != nil; k, v = c.Next() {
		seq, ok := eventSeq(prefix, k)
		if !ok {
			return nil
		}
		e, err := decodeEvent(seq, v)
		if err != nil {
			return fmt.Errorf("task %q: event %d: %w", id, seq, err)
		}
		if !fn(k, e) {
			return nil
		}
	}
	return nil
}

// appendEvents appends events (as Changes.Events or Create's record carry
// them) to task id's log under lim, and deletes the oldest events the caps
// drop.
func appendEvents(tx *bolt.Tx, id string, events []store.Event, lim store.Limits) error {
	if len(events) == 0 {
		return nil
	}
	b := tx.Bucket(bucketEvents)
	prefix := eventPrefix(id)
	last, end, err := logTail(b, prefix)
	if err != nil {
		return fmt.Errorf("task %q: %w", id, err)
	}
	p := lim.PlanAppend(last, end, events)
	// The drops first: the new events are never among them.
	var doomed [][]byte
	err = walkEvents(b, id, 0, func(k []byte, e store.LoggedEvent) bool {
		if !p.Dropped(e) {
			return false
		}
		doomed = append(doomed, bytes.Clone(k))
		return true
	})
	if err != nil {
		return err
	}
	for _, k := range doomed {
		if err := del(b, k); err != nil {
			return err
		}
	}
	for _, e := range p.Events {
		if err := put(b, eventKey(prefix, e.Seq), encodeEvent(e)); err != nil {
			return err
		}
	}
	return nil
}

// deleteEvents deletes task id's log.
func deleteEvents(tx *bolt.Tx, id string) error {
	b := tx.Bucket(bucketEvents)
	prefix := eventPrefix(id)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := del(b, k); err != nil {
			return err
		}
	}
	return nil
}

// Events reads a task's event log; see store.Store. It seeks the task's
// events from after+1, in one read-only transaction.
func (s *Store) Events(ctx context.Context, id string, after uint64, limit int) (store.EventPage, error) {
	limit = store.PageLimit(limit)
	var page store.EventPage
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if id == "" || len(id) > store.MaxIDBytes || tx.Bucket(bucketTasks).Get([]byte(id)) == nil {
			return notFound(id)
		}
		b := tx.Bucket(bucketEvents)
		prefix := eventPrefix(id)
		c := b.Cursor()
		k, _ := c.Seek(prefix)
		first, ok := eventSeq(prefix, k)
		if !ok {
			page = store.NewEventPage(after, 0, 0, nil)
			return nil
		}
		last, _, err := logTail(b, prefix)
		if err != nil {
			return fmt.Errorf("task %q: %w", id, err)
		}
		var events []store.Event
		if after < last {
			err = walkEvents(b, id, max(after+1, first), func(_ []byte, e store.LoggedEvent) bool {
				events = append(events, e.Event)
				return len(events) < limit
			})
			if err != nil {
				return err
			}
		}
		page = store.NewEventPage(after, first, last, events)
		return nil
	})
	return page, err
}
