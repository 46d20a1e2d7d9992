package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/taskbridge/taskbridge/mcptask"
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

// Key prefixes of a ReceiverStore's records.
const (
	storeTaskPrefix   = "task/"   // + task id: a task run for the server
	storeAnswerPrefix = "answer/" // + server task id + "/" + input key: an answer not yet taken
)

// storedTask is a recvTask as the store keeps it.
type storedTask struct {
	ID      string          `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Status  mcptask.Status  `json:"status"`
	Message string          `json:"message,omitempty"`
	Created time.Time       `json:"created"`
	Updated time.Time       `json:"updated"`
	TTLMs   int64           `json:"ttlMs"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

// record is the task as the store keeps it. Call with the state's lock
// held.
func (t *recvTask) record() storedTask {
	return storedTask{ID: t.id, Method: t.method, Params: t.params, Status: t.status, Message: t.message,
		Created: t.created, Updated: t.updated, TTLMs: t.ttl.Milliseconds(), Result: t.result, Error: t.err}
}

// save writes a task's record, when the receiver has a store.
func (r *receiverState) save(rec storedTask) error {
	if r.cfg.Store == nil {
		return nil
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return r.cfg.Store.Save(storeTaskPrefix+rec.ID, raw)
}

// forget deletes a task's record.
func (r *receiverState) forget(id string) {
	if r.cfg.Store == nil {
		return
	}
	if err := r.cfg.Store.Delete(storeTaskPrefix + id); err != nil {
		r.c.log.Warn("deleting a receiver task", "task", id, "error", err)
	}
}

// load takes up the tasks the store kept from an earlier run of the
// client: expired ones are deleted, ended ones served as they are, and
// the handlers of the others run again.
func (r *receiverState) load() {
	if r.cfg.Store == nil {
		return
	}
	recs, err := r.cfg.Store.Load()
	if err != nil {
		r.c.log.Warn("loading the receiver store", "error", err)
		return
	}
	now := time.Now()
	for key, raw := range recs {
		if !strings.HasPrefix(key, storeTaskPrefix) {
			continue
		}
		var rec storedTask
		if err := json.Unmarshal(raw, &rec); err != nil || rec.ID == "" {
			r.c.log.Warn("dropping an unreadable receiver task", "key", key, "error", err)
			_ = r.cfg.Store.Delete(key)
			continue
		}
		ttl := time.Duration(rec.TTLMs) * time.Millisecond
		if !now.Before(rec.Created.Add(ttl)) {
			_ = r.cfg.Store.Delete(key)
			continue
		}
		hctx, cancel := context.WithCancel(context.Background())
		t := &recvTask{id: rec.ID, method: rec.Method, params: rec.Params, status: rec.Status, message: rec.Message,
			created: rec.Created, updated: rec.Updated, ttl: ttl, expires: rec.Created.Add(ttl), result: rec.Result, err: rec.Error,
			done: make(chan struct{}), cancel: cancel}
		if t.status.Terminal() {
			close(t.done)
			cancel()
			r.tasks[t.id] = t
			continue
		}
		run, err := r.runner(t.method, t.params)
		if err != nil {
			// A handler this client no longer has: the task fails.
			je, _ := err.(*jsonrpc.Error)
			if je == nil {
				je = mcptask.InternalError("%s", err.Error())
			}
			t.status, t.message, t.err, t.updated = mcptask.StatusFailed, je.Message, je, now
			close(t.done)
			cancel()
			r.tasks[t.id] = t
			_ = r.save(t.record())
			continue
		}
		r.tasks[t.id] = t
		go r.execute(hctx, t, run)
	}
}

// storedAnswer is an answer to an input request as the store keeps it.
type storedAnswer struct {
	At     time.Time       `json:"at"`
	Answer json.RawMessage `json:"answer"`
}

// answerKey is the store key of the answer to input request key of task
// taskID.
func answerKey(taskID, key string) string { return storeAnswerPrefix + taskID + "/" + key }

// durableAnswer answers input request key of task taskID: with the answer
// an earlier run of the client saved, if the Receiver's store has one;
// otherwise with the handlers, saving the answer before it is sent.
func (c *Client) durableAnswer(ctx context.Context, taskID, key string, req InputRequest) (json.RawMessage, error) {
	st := c.receiverStore()
	if st == nil || taskID == "" {
		return c.answerDirect(ctx, taskID, req)
	}
	if recs, err := st.Load(); err == nil {
		var sa storedAnswer
		if raw, ok := recs[answerKey(taskID, key)]; ok && json.Unmarshal(raw, &sa) == nil && json.Valid(sa.Answer) {
			return sa.Answer, nil
		}
	}
	ans, err := c.answerDirect(ctx, taskID, req)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(storedAnswer{At: time.Now(), Answer: ans})
	if err == nil {
		err = st.Save(answerKey(taskID, key), raw)
	}
	if err != nil {
		c.log.Warn("saving an answer to an input request", "task", taskID, "key", key, "error", err)
	}
	return ans, nil
}

// answersTaken drops the saved answers the server took.
func (c *Client) answersTaken(taskID string, keys []string) {
	st := c.receiverStore()
	if st == nil {
		return
	}
	for _, key := range keys {
		if err := st.Delete(answerKey(taskID, key)); err != nil {
			c.log.Warn("deleting an answer to an input request", "task", taskID, "key", key, "error", err)
		}
	}
}

// pruneAnswers deletes saved answers older than the Receiver's MaxTTL:
// their tasks are gone.
func (c *Client) pruneAnswers() {
	st := c.receiverStore()
	if st == nil {
		return
	}
	recs, err := st.Load()
	if err != nil {
		return
	}
	cfg := *c.opts.Receiver
	cfg.defaults()
	for key, raw := range recs {
		var sa storedAnswer
		if !strings.HasPrefix(key, storeAnswerPrefix) {
			continue
		}
		if json.Unmarshal(raw, &sa) != nil || time.Since(sa.At) > cfg.MaxTTL {
			_ = st.Delete(key)
		}
	}
}

// receiverStore is the Receiver's store, or nil.
func (c *Client) receiverStore() ReceiverStore {
	if r := c.opts.Receiver; r != nil {
		return r.Store
	}
	return nil
}
