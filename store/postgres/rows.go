package postgres

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// row receives one task row (headerCols, or fullCols with full).
type row struct {
	id, owner, message, method, name, args []byte
	status                                 string
	created, updated, ttl, poll            int64
	expires, leaseUntil, wakeAt            *int64
	labelKeys, labelValues                 [][]byte
	version, epoch                         int64
	holder                                 []byte

	result              []byte
	hasError            bool
	errCode             *int64
	errMessage, errData []byte
	histStatus          []string
	histMessage         [][]byte
	histAt              []int64
	varNames, varValues [][]byte
}

func (r *row) dest(full bool) []any {
	d := []any{&r.id, &r.owner, &r.status, &r.message, &r.created, &r.updated, &r.ttl, &r.expires,
		&r.poll, &r.method, &r.name, &r.args, &r.labelKeys, &r.labelValues, &r.version,
		&r.holder, &r.epoch, &r.leaseUntil, &r.wakeAt}
	if full {
		d = append(d, &r.result, &r.hasError, &r.errCode, &r.errMessage, &r.errData,
			&r.histStatus, &r.histMessage, &r.histAt, &r.varNames, &r.varValues)
	}
	return d
}

func nanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func optNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return nanos(*n)
}

// task builds the store record of r.
func (r *row) task(full bool) (*store.Task, error) {
	t := &store.Task{
		ID:            string(r.id),
		Owner:         string(r.owner),
		Status:        mcptask.Status(r.status),
		StatusMessage: string(r.message),
		CreatedAt:     nanos(r.created),
		UpdatedAt:     nanos(r.updated),
		TTL:           time.Duration(r.ttl),
		ExpiresAt:     optNanos(r.expires),
		PollInterval:  time.Duration(r.poll),
		Request:       store.Request{Method: string(r.method), Name: string(r.name), Arguments: json.RawMessage(r.args)},
		Version:       uint64(r.version),
		LeaseHolder:   string(r.holder),
		LeaseEpoch:    uint64(r.epoch),
		LeaseUntil:    optNanos(r.leaseUntil),
		WakeAt:        optNanos(r.wakeAt),
	}
	if len(r.labelKeys) != len(r.labelValues) {
		return nil, fmt.Errorf("task %q: %d label keys, %d values", r.id, len(r.labelKeys), len(r.labelValues))
	}
	if len(r.labelKeys) > 0 {
		t.Labels = make(map[string]string, len(r.labelKeys))
		for i, k := range r.labelKeys {
			t.Labels[string(k)] = string(r.labelValues[i])
		}
	}
	if !full {
		return t, nil
	}
	t.Result = json.RawMessage(r.result)
	if r.hasError {
		t.Error = &mcptask.ErrorInfo{Message: string(r.errMessage), Data: json.RawMessage(r.errData)}
		if r.errCode != nil {
			t.Error.Code = *r.errCode
		}
	}
	if len(r.histStatus) != len(r.histMessage) || len(r.histStatus) != len(r.histAt) {
		return nil, fmt.Errorf("task %q: history arrays of different lengths", r.id)
	}
	for i, st := range r.histStatus {
		t.History = append(t.History, store.StatusChange{Status: mcptask.Status(st), Message: string(r.histMessage[i]), At: nanos(r.histAt[i])})
	}
	if len(r.varNames) != len(r.varValues) {
		return nil, fmt.Errorf("task %q: %d variable names, %d values", r.id, len(r.varNames), len(r.varValues))
	}
	if len(r.varNames) > 0 {
		t.Variables = make(map[string]json.RawMessage, len(r.varNames))
		for i, k := range r.varNames {
			t.Variables[string(k)] = json.RawMessage(r.varValues[i])
		}
	}
	return t, nil
}

// scanOne reads one task from a single-row result; pgx.ErrNoRows when
// there is none.
func scanOne(q pgx.Row, full bool) (*store.Task, error) {
	var r row
	if err := q.Scan(r.dest(full)...); err != nil {
		return nil, err
	}
	return r.task(full)
}

// scanAll reads every task of rows.
func scanAll(rows pgx.Rows, full bool) ([]*store.Task, error) {
	defer rows.Close()
	var out []*store.Task
	for rows.Next() {
		var r row
		if err := rows.Scan(r.dest(full)...); err != nil {
			return nil, err
		}
		t, err := r.task(full)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// optNanosArg is t as a nullable bigint.
func optNanosArg(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

// optBytes is s as a nullable bytea ("" is NULL).
func optBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// labelArrays returns t's labels as key and value arrays sorted by key, or
// nils when it has none.
func labelArrays(t *store.Task) (keys, values [][]byte) {
	if len(t.Labels) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(t.Labels))
	for k := range t.Labels {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		keys = append(keys, []byte(k))
		values = append(values, []byte(t.Labels[k]))
	}
	return keys, values
}

// historyArrays returns t's history as three parallel arrays.
func historyArrays(t *store.Task) (statuses []string, messages [][]byte, at []int64) {
	statuses = make([]string, 0, len(t.History))
	messages = make([][]byte, 0, len(t.History))
	at = make([]int64, 0, len(t.History))
	for _, c := range t.History {
		statuses = append(statuses, string(c.Status))
		messages = append(messages, []byte(c.Message))
		at = append(at, c.At.UnixNano())
	}
	return statuses, messages, at
}

// errorArgs returns has_error, error_code, error_message and error_data.
func errorArgs(t *store.Task) []any {
	if t.Error == nil {
		return []any{false, nil, nil, nil}
	}
	return []any{true, t.Error.Code, []byte(t.Error.Message), []byte(t.Error.Data)}
}

// nonNil turns a nil byte slice into an empty one, for NOT NULL bytea
// columns.
func nonNil(s string) []byte { return append([]byte{}, s...) }

// insertArgs are the arguments of statements.insert for t.
func insertArgs(t *store.Task) []any {
	keys, values := labelArrays(t)
	hs, hm, ha := historyArrays(t)
	var result []byte
	if t.Result != nil {
		result = []byte(t.Result)
	}
	var args []byte
	if t.Request.Arguments != nil {
		args = []byte(t.Request.Arguments)
	}
	out := []any{
		[]byte(t.ID), []byte(t.Owner), string(t.Status), nonNil(t.StatusMessage), t.CreatedAt.UnixNano(),
		t.UpdatedAt.UnixNano(), int64(t.TTL), optNanosArg(t.ExpiresAt), int64(t.PollInterval),
		nonNil(t.Request.Method), nonNil(t.Request.Name), args, keys, values, int64(t.Version),
		optBytes(t.LeaseHolder), int64(t.LeaseEpoch), optNanosArg(t.LeaseUntil), optNanosArg(t.WakeAt),
		hs, hm, ha, result,
	}
	return append(out, errorArgs(t)...)
}

// shard is the counter row of a task: a hash of its id.
func shard(id string) int32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int32(h.Sum32() % counterShards)
}

// record is the change notification of a write: "version|status|hex(id)".
// A payload holds one or more records separated by newlines.
func record(t *store.Task) string {
	return strconv.FormatUint(t.Version, 10) + "|" + string(t.Status) + "|" + hex.EncodeToString([]byte(t.ID))
}

// deleteRecord is the change notification of the delete of task id, which
// had status st: version 0.
func deleteRecord(id string, st mcptask.Status) string {
	return record(&store.Task{ID: id, Status: st})
}

// parseRecord reads one record of a notification payload.
func parseRecord(p string) (store.Change, error) {
	var c store.Change
	v, rest, ok := strings.Cut(p, "|")
	if !ok {
		return c, fmt.Errorf("payload %q", p)
	}
	st, idHex, ok := strings.Cut(rest, "|")
	if !ok {
		return c, fmt.Errorf("payload %q", p)
	}
	version, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return c, fmt.Errorf("payload %q: %w", p, err)
	}
	id, err := hex.DecodeString(idHex)
	if err != nil {
		return c, fmt.Errorf("payload %q: %w", p, err)
	}
	return store.Change{ID: string(id), Status: mcptask.Status(st), Version: version, Deleted: version == 0}, nil
}
