package bboltstore

import (
	"bytes"
	"fmt"
	"log/slog"

	bolt "go.etcd.io/bbolt"
)

// migrateChunk is the number of tasks a schema migration indexes per
// transaction, bounding the memory of one transaction on large files. A
// variable so that tests can make chunks small.
var migrateChunk = 10000

// migrate upgrades a file of an older schema to SchemaVersion, one schema
// at a time; each step records the schema it reached, so an upgrade
// interrupted by a crash resumes where it stopped.
//
// Schema 2 added the by_status, by_name, leases and history buckets
// (created by Open) and the per-status counters; schema 1 headers (format
// 1) stay as they are, since decodeHeader reads them (no lease). The step
// from 1 walks the tasks in id order, migrateChunk per transaction,
// writing each one's by_status and by_name entries and counting it; each
// transaction also records the last id it did under metaMigrated, so that
// it resumes where it stopped. Its last transaction sets the schema
// version to 2. Tasks written before the upgrade have no History.
//
// Schema 3 added the wake bucket (created by Open) and header format 3
// (the wake-up time). No task of an older file has a wake-up time, so the
// empty bucket is its complete wake index and its headers (formats 1 and
// 2, read as WakeAt zero) stay as they are until they are next written:
// the step from 2 only sets the schema version to 3, in one transaction.
//
// Schema 4 added the events bucket (created by Open): the tasks' event
// logs. No task of an older file has events, so every one reads as an
// empty log, and its first event written is numbered 1: the step from 3
// only sets the schema version to 4, in one transaction.
//
// Schema 5 added the queues and schedules buckets (created by Open): an
// older file has no queue entries and no schedule records, so the step
// from 4 only sets the schema version to 5, in one transaction.
//
// Schema 6 added the replicas bucket (created by Open): an older file has
// no replica registered, so the step from 5 only sets the schema version
// to 6, in one transaction.
func migrate(db *bolt.DB, from byte, log *slog.Logger) error {
	start, total := from, 0
	for from == 1 {
		done, n, err := migrateStep(db)
		if err != nil {
			return fmt.Errorf("migrate schema 1 to 2: %w", err)
		}
		total += n
		if done {
			from = 2
		}
	}
	// The steps from 2 to 5 add only buckets, which Open created.
	if from >= 2 && from < SchemaVersion {
		err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(metaSchema, []byte{SchemaVersion})
		})
		if err != nil {
			return fmt.Errorf("migrate schema %d to %d: %w", from, SchemaVersion, err)
		}
	}
	log.Info("bboltstore: migrated the store file", "from_schema", start, "to_schema", SchemaVersion, "tasks_indexed", total)
	return nil
}

// migrateStep indexes the next migrateChunk tasks of a schema 1 file in
// one transaction and reports whether the step to schema 2 is complete.
func migrateStep(db *bolt.DB) (done bool, n int, err error) {
	err = db.Update(func(tx *bolt.Tx) error {
		done, n = false, 0
		meta := tx.Bucket(bucketMeta)
		c := tx.Bucket(bucketTasks).Cursor()
		var k, v []byte
		if from := meta.Get(metaMigrated); from != nil {
			k, v = c.Seek(from)
			if bytes.Equal(k, from) {
				k, v = c.Next()
			}
		} else {
			k, v = c.First()
		}
		var lastID []byte
		for ; k != nil && n < migrateChunk; k, v = c.Next() {
			t, err := decodeHeader(v)
			if err != nil {
				return fmt.Errorf("task %q: %w", k, err)
			}
			if err := tx.Bucket(bucketByStatus).Put(statusKey(t), empty); err != nil {
				return err
			}
			if err := tx.Bucket(bucketByName).Put(nameKey(t), empty); err != nil {
				return err
			}
			if err := addCount(tx, t.Status, 1); err != nil {
				return err
			}
			lastID = k
			n++
		}
		if k != nil {
			return meta.Put(metaMigrated, bytes.Clone(lastID))
		}
		done = true
		if err := meta.Delete(metaMigrated); err != nil {
			return err
		}
		return meta.Put(metaSchema, []byte{2})
	})
	return done, n, err
}
