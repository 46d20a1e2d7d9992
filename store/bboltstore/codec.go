package bboltstore

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Record format bytes. Format 2 of the header appended the lease fields,
// format 3 the wake-up time; decodeHeader still reads format 1 (written
// before leases existed: no holder, epoch 0) and format 2 (written before
// wake-ups existed: no WakeAt).
const (
	headerFormatV1 byte = 1
	headerFormatV2 byte = 2
	headerFormat   byte = 3
	resultFormat   byte = 1
	historyFormat  byte = 1
)

// timeKey is t's Unix nanoseconds with the sign bit flipped, big endian, so
// that byte order is time order.
func timeKey(nanos int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(nanos)^(1<<63))
}

func keyNanos(k []byte) int64 {
	return int64(binary.BigEndian.Uint64(k) ^ (1 << 63))
}

// ownerPrefix is len(owner) as 2 bytes then the owner. Owners are at most
// store.MaxOwnerBytes long, so the length always fits. The status and name
// indexes use the same prefix form (names are at most store.MaxNameBytes).
func ownerPrefix(owner string) []byte {
	b := make([]byte, 0, 2+len(owner)+8+store.MaxIDBytes)
	b = binary.BigEndian.AppendUint16(b, uint16(len(owner)))
	return append(b, owner...)
}

// ownerKey is the key of a (CreatedAt, id) index under a length-prefixed
// string: by_owner, by_status and by_name.
func ownerKey(owner string, createdAt int64, id string) []byte {
	b := ownerPrefix(owner)
	b = binary.BigEndian.AppendUint64(b, uint64(createdAt)^(1<<63))
	return append(b, id...)
}

// statusKey, nameKey and leaseKey are the index keys of a task.
func statusKey(t *store.Task) []byte {
	return ownerKey(string(t.Status), t.CreatedAt.UnixNano(), t.ID)
}

func nameKey(t *store.Task) []byte {
	return ownerKey(t.Request.Name, t.CreatedAt.UnixNano(), t.ID)
}

func leaseKey(until time.Time, id string) []byte {
	return append(timeKey(until.UnixNano()), id...)
}

// countKey is the meta key of the counter of tasks in status st; the value
// is a uint64, big endian.
func countKey(st mcptask.Status) []byte { return append([]byte("count:"), st...) }

func expiryKey(expiresAt int64, id string) []byte {
	return append(timeKey(expiresAt), id...)
}

// wakeKey is the key of a task's entry in the wake bucket.
func wakeKey(wakeAt time.Time, id string) []byte {
	return append(timeKey(wakeAt.UnixNano()), id...)
}

// encoder appends length-prefixed fields.
type encoder struct{ b []byte }

func (e *encoder) byte(v byte)      { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) optTime(t time.Time) { // the zero time as one 0 byte
	if t.IsZero() {
		e.byte(0)
		return
	}
	e.byte(1)
	e.varint(t.UnixNano())
}
func (e *encoder) optBytes(v []byte) { // nil and empty are distinct
	if v == nil {
		e.uvarint(0)
		return
	}
	e.uvarint(uint64(len(v)) + 1)
	e.b = append(e.b, v...)
}

// decoder reads what encoder wrote. It never panics: the first problem
// sticks in err and every later read returns a zero value. Everything it
// returns is copied out of the input (bbolt memory is only valid inside its
// transaction).
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// optTime reads what encoder.optTime wrote.
func (d *decoder) optTime() time.Time {
	if d.byte() != 1 {
		return time.Time{}
	}
	return timeOrZero(d.varint(), true)
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) take(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.take(d.uvarint())) }
func (d *decoder) optBytes() []byte {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	v := d.take(n - 1)
	if d.err != nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}

func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = errCorrupt
	}
	return d.err
}

func timeOrZero(nanos int64, present bool) time.Time {
	if !present {
		return time.Time{}
	}
	return time.Unix(0, nanos).UTC()
}

// encodeHeader encodes every field of t except Variables, Result, Error
// and History, in header format 3.
func encodeHeader(t *store.Task) []byte {
	e := encoder{b: make([]byte, 0, 128+len(t.Request.Arguments))}
	e.byte(headerFormat)
	e.headerFields(t)
	e.leaseFields(t)
	// Format 3: the wake-up time.
	e.optTime(t.WakeAt)
	return e.b
}

// leaseFields encodes what format 2 appended to format 1: the lease.
func (e *encoder) leaseFields(t *store.Task) {
	e.str(t.LeaseHolder)
	e.uvarint(t.LeaseEpoch)
	e.optTime(t.LeaseUntil)
}

// headerFields encodes the header fields of format 1: everything but the
// lease, which format 2 appends, and the wake-up time, which format 3
// appends.
func (e *encoder) headerFields(t *store.Task) {
	e.str(t.ID)
	e.str(t.Owner)
	e.str(string(t.Status))
	e.str(t.StatusMessage)
	e.varint(t.CreatedAt.UnixNano())
	e.varint(t.UpdatedAt.UnixNano())
	e.varint(int64(t.TTL))
	e.optTime(t.ExpiresAt)
	e.varint(int64(t.PollInterval))
	e.str(t.Request.Method)
	e.str(t.Request.Name)
	e.optBytes(t.Request.Arguments)
	keys := make([]string, 0, len(t.Labels))
	for k := range t.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
		e.str(t.Labels[k])
	}
	e.uvarint(t.Version)
}

// decodeHeader reads a header of format 1, 2 or 3.
func decodeHeader(b []byte) (*store.Task, error) {
	d := decoder{b: b}
	format := d.byte()
	if format < headerFormatV1 || format > headerFormat {
		return nil, fmt.Errorf("%w: unknown header format", errCorrupt)
	}
	t := &store.Task{}
	t.ID = d.str()
	t.Owner = d.str()
	t.Status = mcptask.Status(d.str())
	t.StatusMessage = d.str()
	t.CreatedAt = timeOrZero(d.varint(), true)
	t.UpdatedAt = timeOrZero(d.varint(), true)
	t.TTL = time.Duration(d.varint())
	t.ExpiresAt = d.optTime()
	t.PollInterval = time.Duration(d.varint())
	t.Request.Method = d.str()
	t.Request.Name = d.str()
	t.Request.Arguments = d.optBytes()
	n := d.uvarint()
	if n > uint64(len(d.b)) { // each label takes at least 2 bytes
		d.fail()
	}
	if n > 0 && d.err == nil {
		t.Labels = make(map[string]string, n)
		for i := uint64(0); i < n && d.err == nil; i++ {
			k := d.str()
			t.Labels[k] = d.str()
		}
	}
	t.Version = d.uvarint()
	if format >= headerFormatV2 {
		t.LeaseHolder = d.str()
		t.LeaseEpoch = d.uvarint()
		t.LeaseUntil = d.optTime()
	}
	if format >= headerFormat {
		t.WakeAt = d.optTime()
	}
	if err := d.done(); err != nil {
		return nil, err
	}
	return t, nil
}

// encodeHistory encodes a status history: the format byte, the number of
// entries, then each entry's status, message and time.
func encodeHistory(h []store.StatusChange) []byte {
	e := encoder{b: make([]byte, 0, 8+24*len(h))}
	e.byte(historyFormat)
	e.uvarint(uint64(len(h)))
	for _, c := range h {
		e.str(string(c.Status))
		e.str(c.Message)
		e.varint(c.At.UnixNano())
	}
	return e.b
}

func decodeHistory(b []byte) ([]store.StatusChange, error) {
	d := decoder{b: b}
	if d.byte() != historyFormat {
		return nil, fmt.Errorf("%w: unknown history format", errCorrupt)
	}
	n := d.uvarint()
	if n > uint64(len(d.b)) { // each entry takes at least 3 bytes
		d.fail()
	}
	var h []store.StatusChange
	for i := uint64(0); i < n && d.err == nil; i++ {
		h = append(h, store.StatusChange{Status: mcptask.Status(d.str()), Message: d.str(), At: timeOrZero(d.varint(), true)})
	}
	if err := d.done(); err != nil {
		return nil, err
	}
	return h, nil
}

// encodeResult encodes t's Result and Error; it returns nil when the task
// has neither.
func encodeResult(t *store.Task) []byte {
	if t.Result == nil && t.Error == nil {
		return nil
	}
	e := encoder{b: make([]byte, 0, 32+len(t.Result))}
	e.byte(resultFormat)
	e.optBytes(t.Result)
	if t.Error == nil {
		e.byte(0)
	} else {
		e.byte(1)
		e.varint(t.Error.Code)
		e.str(t.Error.Message)
		e.optBytes(t.Error.Data)
	}
	return e.b
}

func decodeResult(b []byte, t *store.Task) error {
	d := decoder{b: b}
	if d.byte() != resultFormat {
		return fmt.Errorf("%w: unknown result format", errCorrupt)
	}
	t.Result = json.RawMessage(d.optBytes())
	if d.byte() == 1 {
		t.Error = &mcptask.ErrorInfo{Code: d.varint(), Message: d.str(), Data: json.RawMessage(d.optBytes())}
	}
	return d.done()
}
