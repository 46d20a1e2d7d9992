package bboltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
	"strings"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// ErrCorrupt matches every error that reports a damaged store file: Open of
// a file bbolt cannot read, a read that hits a damaged page or record, and
// Check's findings. Test with errors.Is; the error itself is a
// *CorruptError naming the file.
var ErrCorrupt = errors.New("bboltstore: corrupt store file")

// errCorrupt marks a record (or index key) the store cannot decode.
var errCorrupt = fmt.Errorf("%w: bad record", ErrCorrupt)

// CorruptError reports a damaged store file. It matches ErrCorrupt.
type CorruptError struct {
	// Path is the store file.
	Path string
	// Detail says what is wrong.
	Detail string
	// Err is the underlying error, if any.
	Err error
}

// Error implements error.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("bboltstore: store file %s is corrupt: %s; restore it from a backup or move it away", e.Path, e.Detail)
}

// Is makes a CorruptError match ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the underlying error.
func (e *CorruptError) Unwrap() error { return e.Err }

// isBoltCorruption reports whether err from bolt.Open means a damaged file
// (rather than, say, a missing directory or a held lock).
func isBoltCorruption(err error) bool {
	return errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) ||
		errors.Is(err, berrors.ErrVersionMismatch) || errors.Is(err, berrors.ErrInvalidMapping) ||
		strings.Contains(err.Error(), "file size too small")
}

// Facts of the bbolt file format (version 2) that preflight reads. bbolt
// writes them in the machine's byte order; the store runs on little-endian
// machines (amd64, arm64).
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16
	metaChecksumOff  = 56 // the checksum covers the meta's first 56 bytes
	metaSize         = 64
	freelistPageFlag = 0x10
	noFreelist       = ^uint64(0)
)

// boltMeta is what preflight reads from a meta page.
type boltMeta struct {
	pageSize, freelist, pgid, txid uint64
}

// readMeta reads and validates (magic, version, checksum) the meta page at
// off.
func readMeta(f *os.File, off int64) (boltMeta, bool) {
	m := make([]byte, metaSize)
	if _, err := f.ReadAt(m, off+pageHeaderSize); err != nil {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(m[:metaChecksumOff])
	if binary.LittleEndian.Uint32(m[0:]) != boltMagic || binary.LittleEndian.Uint32(m[4:]) != boltVersion ||
		binary.LittleEndian.Uint64(m[metaChecksumOff:]) != h.Sum64() {
		return boltMeta{}, false
	}
	return boltMeta{
		pageSize: uint64(binary.LittleEndian.Uint32(m[8:])),
		freelist: binary.LittleEndian.Uint64(m[32:]),
		pgid:     binary.LittleEndian.Uint64(m[40:]),
		txid:     binary.LittleEndian.Uint64(m[48:]),
	}, true
}

// preflightHook is preflight; tests replace it to reach the damage only
// bbolt notices.
var preflightHook = preflight

// preflight checks an existing file before bbolt maps it, for the damage
// bbolt does not survive: it reads the meta pages the way bbolt does
// (magic, version, checksum; the valid one with the higher transaction id
// wins), then fails with a *CorruptError when the file is shorter than the
// pages that meta says it holds (a truncated file, which bbolt would map
// and fault on) or when its freelist page is not a well-formed freelist
// whose page ids lie inside the file (bbolt would panic, or allocate
// whatever count the page claims and run out of memory). It leaves every
// other problem (no valid meta page, say) to bbolt.
func preflight(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // bolt.Open reports it
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return nil // a new file, or bolt.Open reports it
	}
	size := uint64(st.Size())
	m0, ok0 := readMeta(f, 0)
	ps := int64(os.Getpagesize())
	if ok0 {
		ps = int64(m0.pageSize)
	}
	m1, ok1 := readMeta(f, ps)
	var m boltMeta
	switch {
	case ok0 && ok1 && m1.txid > m0.txid, !ok0 && ok1:
		m = m1
	case ok0:
		m = m0
	default:
		return nil
	}
	bad := func(format string, args ...any) error {
		return &CorruptError{Path: path, Detail: fmt.Sprintf(format, args...)}
	}
	if m.pageSize < 1024 || m.pageSize > 1<<20 {
		return bad("page size %d", m.pageSize)
	}
	if need := m.pgid * m.pageSize; m.pgid > size || size < need {
		return bad("truncated: it is %d bytes, its pages need %d", size, need)
	}
	if m.freelist == noFreelist {
		return nil
	}
	if m.freelist < 2 || m.freelist >= m.pgid {
		return bad("freelist page %d outside pages 2..%d", m.freelist, m.pgid-1)
	}
	hdr := make([]byte, pageHeaderSize+8)
	if _, err := f.ReadAt(hdr, int64(m.freelist*m.pageSize)); err != nil {
		return bad("reading freelist page %d: %v", m.freelist, err)
	}
	flags := binary.LittleEndian.Uint16(hdr[8:])
	count := uint64(binary.LittleEndian.Uint16(hdr[10:]))
	overflow := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if flags != freelistPageFlag {
		return bad("page %d is not a freelist page (flags %#x)", m.freelist, flags)
	}
	if m.freelist+1+overflow > m.pgid {
		return bad("freelist page %d overflows past the last page", m.freelist)
	}
	start := uint64(pageHeaderSize)
	if count == 0xFFFF {
		count = binary.LittleEndian.Uint64(hdr[pageHeaderSize:])
		start += 8
	}
	if space := (1+overflow)*m.pageSize - start; count > space/8 {
		return bad("freelist page %d claims %d free pages, room for %d", m.freelist, count, space/8)
	}
	ids := make([]byte, count*8)
	if _, err := f.ReadAt(ids, int64(m.freelist*m.pageSize+start)); err != nil {
		return bad("reading freelist page %d: %v", m.freelist, err)
	}
	for i := uint64(0); i < count; i++ {
		if id := binary.LittleEndian.Uint64(ids[i*8:]); id < 2 || id >= m.pgid {
			return bad("freelist page %d lists page %d, outside pages 2..%d", m.freelist, id, m.pgid-1)
		}
	}
	return nil
}

// openBolt is bolt.Open made safe for damaged files: bbolt panics on some
// damage it meets while opening (a bad freelist page, say) after it has
// taken the file lock and mapped the file. openBolt recovers the panic,
// unlocks and closes the file (the memory map bbolt made of the damaged
// file is leaked, once) and returns a *CorruptError, as it does for the
// errors bbolt returns for damaged meta pages.
func openBolt(path string, o *bolt.Options) (db *bolt.DB, file *os.File, err error) {
	if err := preflightHook(path); err != nil {
		return nil, nil, err
	}
	// A page bbolt maps but the file no longer has (a truncated file)
	// faults instead of panicking; make the fault a panic we recover.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				unlockFile(file)
				_ = file.Close()
			}
			db, file, err = nil, nil, &CorruptError{Path: path, Detail: fmt.Sprintf("bbolt failed while opening it: %v", r)}
		}
	}()
	db, err = bolt.Open(path, 0o600, o)
	if err != nil {
		if isBoltCorruption(err) {
			return nil, nil, &CorruptError{Path: path, Detail: err.Error(), Err: err}
		}
		return nil, nil, fmt.Errorf("bboltstore: open %s: %w", path, err)
	}
	return db, file, nil
}

// guard runs fn (a bbolt transaction) and turns a panic inside it, which
// bbolt raises on damaged pages, into a *CorruptError. bbolt's View and
// Update roll their transaction back on a panic, so the database stays
// usable for other transactions. Record errors (errCorrupt) are reported
// as a *CorruptError too.
func guard(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{Path: path, Detail: fmt.Sprintf("bbolt failed reading it: %v", r)}
		}
	}()
	err = fn()
	var ce *CorruptError
	if err != nil && errors.Is(err, ErrCorrupt) && !errors.As(err, &ce) {
		err = &CorruptError{Path: path, Detail: err.Error(), Err: err}
	}
	return err
}

// closeQuietly closes db after a failure, recovering a panic (a damaged
// file), and then closes its file, in case bbolt did not get that far: the
// file lock goes with it.
func closeQuietly(db *bolt.DB, file *os.File) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("close: %v", r)
		}
		if file != nil { // usually already closed by db.Close
			unlockFile(file)
			_ = file.Close()
		}
	}()
	return db.Close()
}

// maxCheckProblems bounds the problems Check lists.
const maxCheckProblems = 20

// checker collects Check's findings.
type checker struct {
	problems []string
	more     int
}

func (c *checker) addf(format string, args ...any) {
	if len(c.problems) == maxCheckProblems {
		c.more++
		return
	}
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// Check verifies the store file at path offline and returns nil when it is
// sound, or a *CorruptError (matching ErrCorrupt) listing what is wrong. It
// never panics on a damaged file. The file must not be open in a Store
// (Check waits up to DefaultOpenTimeout for the lock, then fails).
//
// It runs bbolt's own consistency check (page structure, freelist), then
// the store's invariants: every task header decodes and is stored under
// its id; every task has exactly its index entries (by_owner, by_status,
// by_name; expiry with an ExpiresAt; leases with a LeaseHolder; wake with
// a WakeAt; active while not terminal) and every index entry belongs to a
// task (checked by looking each task's entries up and comparing entry
// counts); no terminal task has a lease or a wake-up time; variables,
// results and histories belong to existing tasks and decode; every
// event belongs to an existing task and decodes, and each task's events
// are numbered densely and placed end to end; and the status counters
// equal the number of tasks per status. A file of an
// older schema (not yet upgraded by Open) is checked against what its
// schema had. Check reads the whole file: it takes time proportional to
// its size.
func Check(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("bboltstore: check %s: %w", path, err)
	}
	db, file, err := openBolt(path, &bolt.Options{ReadOnly: true, Timeout: DefaultOpenTimeout})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return fmt.Errorf("bboltstore: check %s: the file is open in a store: %w", path, err)
		}
		return err
	}
	defer func() { _ = closeQuietly(db, file) }()
	c := &checker{}
	err = guard(path, func() error {
		return db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				c.addf("bbolt: %v", err)
			}
			if len(c.problems) > 0 {
				return nil // the pages themselves are broken; stop here
			}
			checkStore(tx, c)
			return nil
		})
	})
	if err != nil {
		return err
	}
	if len(c.problems) == 0 {
		return nil
	}
	detail := strings.Join(c.problems, "; ")
	if c.more > 0 {
		detail += fmt.Sprintf("; and %d more problems", c.more)
	}
	return &CorruptError{Path: path, Detail: detail}
}

// checkStore checks the store's invariants in tx (see Check): the meta
// bucket and schema, then every task's header and the index entries and
// side records it needs, then that the indexes hold nothing more, that no
// side record lacks its task, and the status counters.
func checkStore(tx *bolt.Tx, c *checker) {
	sc, ok := newStoreCheck(tx, c)
	if !ok {
		return
	}
	tasks := tx.Bucket(bucketTasks)
	cur := tasks.Cursor()
	for id, v := cur.First(); id != nil; id, v = cur.Next() {
		sc.task(id, v)
	}
	sc.indexesExact()
	sc.sideRecordsOwned(tasks)
	if sc.has(bucketEvents) {
		sc.eventLogs(tasks)
	}
	if sc.has(bucketQueues) {
		sc.queuesAndSchedules()
	}
	if sc.v2 {
		if got := readCounts(tx); !equalCounts(got, sc.counts) {
			c.addf("status counters %v, the tasks number %v", got, sc.counts)
		}
	}
}

// storeCheck is one run of checkStore over a transaction.
type storeCheck struct {
	tx      *bolt.Tx
	c       *checker
	version byte // the file's schema version
	v2      bool // schema 2 or later
	indexes map[string]*indexCount
	counts  map[mcptask.Status]int // tasks by status, as found
}

// indexCount is an index bucket and the entries the tasks need in it.
type indexCount struct {
	name     []byte
	expected int
}

// newStoreCheck checks the meta bucket, the schema version and that every
// bucket of that schema exists; false when checking cannot go on.
func newStoreCheck(tx *bolt.Tx, c *checker) (*storeCheck, bool) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		c.addf("missing bucket %s", bucketMeta)
		return nil, false
	}
	schema := meta.Get(metaSchema)
	if len(schema) != 1 || schema[0] < 1 || schema[0] > SchemaVersion {
		c.addf("schema version %v (want %d)", schema, SchemaVersion)
		return nil, false
	}
	sc := &storeCheck{tx: tx, c: c, version: schema[0], v2: schema[0] >= 2, indexes: map[string]*indexCount{}, counts: store.NewCounts()}
	for _, name := range allBuckets {
		if tx.Bucket(name) == nil && sc.has(name) {
			c.addf("missing bucket %s", name)
		}
	}
	if len(c.problems) > 0 {
		return nil, false
	}
	if k := meta.Get(metaCursorKey); len(k) != cursorKeyLen {
		c.addf("cursor key of %d bytes (want %d)", len(k), cursorKeyLen)
	}
	for _, b := range [][]byte{bucketByOwner, bucketByStatus, bucketByName, bucketExpiry, bucketLeases, bucketWake, bucketActive} {
		if sc.has(b) {
			sc.indexes[string(b)] = &indexCount{name: b}
		}
	}
	return sc, true
}

// has reports whether the file's schema has bucket (a file of an older
// schema, not yet upgraded by Open, lacks what the later ones added).
func (sc *storeCheck) has(bucket []byte) bool { return bucketSchema(bucket) <= sc.version }

// expect notes that task id needs key in the index bucket, and checks it
// is there.
func (sc *storeCheck) expect(bucket, key []byte, id []byte) {
	sc.indexes[string(bucket)].expected++
	if sc.tx.Bucket(bucket).Get(key) == nil {
		sc.c.addf("task %q has no %s entry", id, bucket)
	}
}

// task checks one task record: its header, the index entries it needs,
// and its result and history records.
func (sc *storeCheck) task(id, v []byte) {
	c := sc.c
	if v == nil {
		c.addf("nested bucket %q in tasks", id)
		return
	}
	t, err := decodeHeader(v)
	if err != nil {
		c.addf("task %q: header: %v", id, err)
		return
	}
	if t.ID != string(id) {
		c.addf("task %q: header names id %q", id, t.ID)
		return
	}
	if !t.Status.Valid() {
		c.addf("task %q: status %q", id, t.Status)
		return
	}
	sc.counts[t.Status]++
	sc.taskIndexes(id, t)
	if r := sc.tx.Bucket(bucketResults).Get(id); r != nil {
		if err := decodeResult(r, &store.Task{}); err != nil {
			c.addf("task %q: result: %v", id, err)
		}
	}
	if sc.v2 {
		if h := sc.tx.Bucket(bucketHistory).Get(id); h != nil {
			if _, err := decodeHistory(h); err != nil {
				c.addf("task %q: history: %v", id, err)
			}
		}
	}
}

// taskIndexes checks the index entries task t needs, and that an ended
// task holds no lease and no wake-up.
func (sc *storeCheck) taskIndexes(id []byte, t *store.Task) {
	c := sc.c
	sc.expect(bucketByOwner, ownerKey(t.Owner, t.CreatedAt.UnixNano(), t.ID), id)
	if sc.v2 {
		sc.expect(bucketByStatus, statusKey(t), id)
		sc.expect(bucketByName, nameKey(t), id)
	}
	if !t.ExpiresAt.IsZero() {
		sc.expect(bucketExpiry, expiryKey(t.ExpiresAt.UnixNano(), t.ID), id)
	}
	if t.LeaseHolder != "" {
		if t.Status.Terminal() {
			c.addf("task %q is %s but leased by %q", id, t.Status, t.LeaseHolder)
		}
		if sc.v2 {
			sc.expect(bucketLeases, leaseKey(t.LeaseUntil, t.ID), id)
		} else {
			c.addf("task %q has a lease in a schema 1 file", id)
		}
	}
	if !t.WakeAt.IsZero() {
		if t.Status.Terminal() {
			c.addf("task %q is %s but has a wake-up at %v", id, t.Status, t.WakeAt)
		}
		if sc.has(bucketWake) {
			sc.expect(bucketWake, wakeKey(t.WakeAt, t.ID), id)
		} else {
			c.addf("task %q has a wake-up time in a schema %d file", id, sc.version)
		}
	}
	if !t.Status.Terminal() {
		sc.expect(bucketActive, id, id)
	}
}

// indexesExact checks that each index holds as many entries as the tasks
// need: every task has its entries, so equal counts mean no stray ones.
func (sc *storeCheck) indexesExact() {
	for _, ix := range sc.indexes {
		n := 0
		ic := sc.tx.Bucket(ix.name).Cursor()
		for k, _ := ic.First(); k != nil; k, _ = ic.Next() {
			n++
		}
		if n != ix.expected {
			sc.c.addf("%s holds %d entries, the tasks need %d", ix.name, n, ix.expected)
		}
	}
}

// sideRecordsOwned checks that no variables, result or history record
// lacks its task.
func (sc *storeCheck) sideRecordsOwned(tasks *bolt.Bucket) {
	for _, b := range [][]byte{bucketVars, bucketResults, bucketHistory} {
		if !sc.has(b) {
			continue
		}
		bc := sc.tx.Bucket(b).Cursor()
		for k, _ := bc.First(); k != nil; k, _ = bc.Next() {
			if tasks.Get(k) == nil {
				sc.c.addf("%s entry %q has no task", b, k)
			}
		}
	}
}

func equalCounts(a, b map[mcptask.Status]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// eventLogs checks the events bucket: every key is a task's event key and
// its task exists, every record decodes, and each task's events follow
// each other (Seq one more, Pos the End of the one before).
func (sc *storeCheck) eventLogs(tasks *bolt.Bucket) {
	var (
		prefix []byte
		prev   store.LoggedEvent
	)
	c := sc.tx.Bucket(bucketEvents).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) < 2 || len(k) != 2+int(binary.BigEndian.Uint16(k))+8 {
			sc.c.addf("events key %q is malformed", k)
			continue
		}
		id := k[2 : len(k)-8]
		seq, _ := eventSeq(k[:len(k)-8], k)
		e, err := decodeEvent(seq, v)
		if err != nil {
			sc.c.addf("task %q: event %d: %v", id, seq, err)
			continue
		}
		if !bytes.Equal(prefix, k[:len(k)-8]) {
			prefix, prev = bytes.Clone(k[:len(k)-8]), e
			if tasks.Get(id) == nil {
				sc.c.addf("events of task %q, which does not exist", id)
			}
			continue
		}
		if e.Seq != prev.Seq+1 || e.Pos != prev.End() {
			sc.c.addf("task %q: event %d (at %d) follows event %d (ending at %d)", id, e.Seq, e.Pos, prev.Seq, prev.End())
		}
		prev = e
	}
}
