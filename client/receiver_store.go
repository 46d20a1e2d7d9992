package client

import (
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A ReceiverStore keeps what a Receiver computed for the server across
// restarts of the client (Receiver.Store): the tasks it runs for the
// server (core dialect), with their results once they have them, and the
// answers to a task's input requests (extension dialect) until the server
// took them. A client that restarts with the same store serves the same
// tasks again (tasks/get, tasks/result on the next connection), runs
// again the handlers that had not finished, and sends an answer it
// computed instead of computing it again. Keys and values are the
// Receiver's own; every Save is durable when it returns.
type ReceiverStore interface {
	// Load returns every record saved and not deleted.
	Load() (map[string][]byte, error)
	// Save writes value under key, durably, before it returns.
	Save(key string, value []byte) error
	// Delete removes key (a missing key is no error).
	Delete(key string) error
}

// BoltReceiverStore is a ReceiverStore in a bbolt file: one bucket, each
// Save and Delete one transaction, synced to disk before it returns. The
// file is locked while it is open: one client at a time.
type BoltReceiverStore struct {
	db *bolt.DB
}

var receiverBucket = []byte("taskbridge-receiver")

// OpenReceiverStore opens the bbolt file at path as a ReceiverStore,
// creating it if needed. Close it when the client is closed.
func OpenReceiverStore(path string) (*BoltReceiverStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("client: opening the receiver store %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(receiverBucket)
		return err
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("client: the receiver store %s: %w", path, err)
	}
	return &BoltReceiverStore{db: db}, nil
}

// Load implements ReceiverStore.
func (s *BoltReceiverStore) Load() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(receiverBucket)
		if b == nil {
			return errors.New("the receiver bucket is missing")
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	return out, err
}

// Save implements ReceiverStore.
func (s *BoltReceiverStore) Save(key string, value []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(receiverBucket).Put([]byte(key), value)
	})
}

// Delete implements ReceiverStore.
func (s *BoltReceiverStore) Delete(key string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(receiverBucket).Delete([]byte(key))
	})
}

// Close closes the file.
func (s *BoltReceiverStore) Close() error { return s.db.Close() }
