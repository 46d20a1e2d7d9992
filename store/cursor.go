package store

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
)

// Cursor format constants.
const (
	// CursorVersion is the first byte of every cursor payload. A cursor with
	// another version byte is rejected with ErrInvalidCursor.
	CursorVersion byte = 1
	// MaxCursorLen bounds the length (in characters) of a cursor string that
	// Decode will look at; longer inputs are rejected without decoding.
	MaxCursorLen = 512

	cursorMACLen    = 16
	cursorHeaderLen = 1 + 8 // version byte + createdAt unix nanos
)

// cursorEncoding is strict so that every accepted string is the canonical
// encoding of its bytes: a cursor string is accepted only if it is exactly
// what Encode produced.
var cursorEncoding = base64.RawURLEncoding.Strict()

// CursorCodec encodes and authenticates List cursors. A cursor records the
// position (createdAt, id) of the last task of a page, bound to the owner it
// was issued for with a truncated HMAC-SHA256 under the store's secret key.
//
// Wire form: base64url without padding of
//
//	version (1 byte) | createdAt unix nanos (8 bytes, big endian) | id bytes | MAC (16 bytes)
//
// where MAC = HMAC-SHA256(key, len(owner) as 8 bytes BE | owner | payload)
// truncated to 16 bytes and payload is everything before the MAC.
//
// A CursorCodec is immutable and safe for concurrent use.
type CursorCodec struct {
	key []byte
}

// NewCursorCodec returns a codec that authenticates cursors with key. The
// key is copied. Backends use a random key of at least 32 bytes; durable
// backends persist it so cursors survive a restart.
func NewCursorCodec(key []byte) *CursorCodec {
	return &CursorCodec{key: append([]byte(nil), key...)}
}

// queryBinding is the high bit of the binding's length prefix: it separates
// Query cursors (bound to a filter encoding) from List cursors (bound to an
// owner, whose length never has that bit), so that no cursor of one kind is
// ever accepted as the other.
const queryBinding = 1 << 63

func (c *CursorCodec) mac(owner string, payload []byte) []byte {
	return c.macBound(uint64(len(owner)), []byte(owner), payload)
}

func (c *CursorCodec) macBound(prefix uint64, binding, payload []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], prefix)
	m.Write(n[:])
	m.Write(binding)
	m.Write(payload)
	return m.Sum(nil)[:cursorMACLen]
}

// Encode returns the cursor for position (createdAt, id) in owner's listing.
func (c *CursorCodec) Encode(owner string, createdAt time.Time, id string) string {
	return c.encode(c.mac, owner, createdAt, id)
}

func (c *CursorCodec) encode(mac func(string, []byte) []byte, binding string, createdAt time.Time, id string) string {
	buf := make([]byte, 0, cursorHeaderLen+len(id)+cursorMACLen)
	buf = append(buf, CursorVersion)
	buf = binary.BigEndian.AppendUint64(buf, uint64(createdAt.UnixNano()))
	buf = append(buf, id...)
	buf = append(buf, mac(binding, buf)...)
	return cursorEncoding.EncodeToString(buf)
}

// queryKey is the canonical encoding of a query's filters (after
// NormalizeQuery), each length-prefixed: the statuses, the name, the owner,
// then the direction when it is oldest first.
// Cursor and Limit are not part of it (the page size may change between
// pages).
func queryKey(q Query) string {
	var b []byte
	b = binary.BigEndian.AppendUint64(b, uint64(len(q.Statuses)))
	for _, s := range q.Statuses {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(q.Name)))
	b = append(b, q.Name...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(q.Owner)))
	b = append(b, q.Owner...)
	if q.Oldest {
		// A trailing field only for oldest-first queries, so that the
		// cursors of newest-first queries stay what they were.
		b = append(b, "oldest"...)
	}
	return string(b)
}

func (c *CursorCodec) queryMAC(key string, payload []byte) []byte {
	return c.macBound(queryBinding|uint64(len(key)), []byte(key), payload)
}

// EncodeQuery returns the cursor for position (createdAt, id) in the
// results of q, which must be normalized (NormalizeQuery). The cursor is
// bound to q's filters: it decodes only for a query with the same
// Statuses (as a set), Name, Owner and direction (Oldest). The wire form is Encode's, with
// the MAC over the filters instead of an owner.
func (c *CursorCodec) EncodeQuery(q Query, createdAt time.Time, id string) string {
	return c.encode(c.queryMAC, queryKey(q), createdAt, id)
}

// DecodeQuery verifies cursor for q (normalized) and returns the position
// it records; it fails like Decode, with ErrInvalidCursor, also for a List
// cursor or a cursor of a query with other filters.
func (c *CursorCodec) DecodeQuery(q Query, cursor string) (createdAt time.Time, id string, err error) {
	return c.decode(c.queryMAC, queryKey(q), cursor)
}

// Decode verifies cursor for owner and returns the position it records. Any
// malformed, truncated, oversized, wrong-version or unauthenticated input
// (including a cursor issued for another owner or by another store) fails
// with an error wrapping ErrInvalidCursor. Decode never panics.
func (c *CursorCodec) Decode(owner, cursor string) (createdAt time.Time, id string, err error) {
	return c.decode(c.mac, owner, cursor)
}

func (c *CursorCodec) decode(mac func(string, []byte) []byte, binding, cursor string) (createdAt time.Time, id string, err error) {
	if cursor == "" {
		return time.Time{}, "", fmt.Errorf("%w: empty", ErrInvalidCursor)
	}
	if len(cursor) > MaxCursorLen {
		return time.Time{}, "", fmt.Errorf("%w: longer than %d characters", ErrInvalidCursor, MaxCursorLen)
	}
	// The decoder skips '\r' and '\n'; accept only the alphabet so that a
	// cursor is accepted only in exactly the form Encode produced.
	for i := 0; i < len(cursor); i++ {
		c := cursor[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return time.Time{}, "", fmt.Errorf("%w: bad character", ErrInvalidCursor)
		}
	}
	raw, derr := cursorEncoding.DecodeString(cursor)
	if derr != nil {
		return time.Time{}, "", fmt.Errorf("%w: bad encoding", ErrInvalidCursor)
	}
	if len(raw) < cursorHeaderLen+cursorMACLen {
		return time.Time{}, "", fmt.Errorf("%w: truncated", ErrInvalidCursor)
	}
	payload, sum := raw[:len(raw)-cursorMACLen], raw[len(raw)-cursorMACLen:]
	// Check the MAC before looking at anything else so that a forged cursor
	// learns nothing about the format beyond its length.
	if !hmac.Equal(sum, mac(binding, payload)) {
		return time.Time{}, "", fmt.Errorf("%w: authentication failed", ErrInvalidCursor)
	}
	if payload[0] != CursorVersion {
		return time.Time{}, "", fmt.Errorf("%w: unknown version %d", ErrInvalidCursor, payload[0])
	}
	nanos := int64(binary.BigEndian.Uint64(payload[1:cursorHeaderLen]))
	return time.Unix(0, nanos).UTC(), string(payload[cursorHeaderLen:]), nil
}
