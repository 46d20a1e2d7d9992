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

// migrate upgrades a schema 1 file to schema 2. Schema 2 added the
// by_status, by_name, leases and history buckets (created by Open) and the
// per-status counters; schema 1 headers (format 1) stay as they are, since
// decodeHeader reads them (no lease). migrate walks the tasks in id order,
// migrateChunk per transaction, writing each one's by_status and by_name
// entries and counting it; each transaction also records the last id it
// did under metaMigrated, so a migration interrupted by a crash resumes
// where it stopped. The last transaction sets the schema version to 2.
// Tasks written before the upgrade have no History.
func migrate(db *bolt.DB, log *slog.Logger) error {
	total := 0
	for {
		done, n, err := migrateStep(db)
		if err != nil {
			return fmt.Errorf("migrate schema 1 to %d: %w", SchemaVersion, err)
		}
		total += n
		if done {
			log.Info("bboltstore: migrated the store file", "from_schema", 1, "to_schema", SchemaVersion, "tasks", total)
			return nil
		}
	}
}

// migrateStep indexes the next migrateChunk tasks in one transaction and
// reports whether the migration is complete.
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
		return meta.Put(metaSchema, []byte{SchemaVersion})
	})
	return done, n, err
}
