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

func (c *CursorCodec) mac(owner string, payload []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(owner)))
	m.Write(n[:])
	m.Write([]byte(owner))
	m.Write(payload)
	return m.Sum(nil)[:cursorMACLen]
}

// Encode returns the cursor for position (createdAt, id) in owner's listing.
func (c *CursorCodec) Encode(owner string, createdAt time.Time, id string) string {
	buf := make([]byte, 0, cursorHeaderLen+len(id)+cursorMACLen)
	buf = append(buf, CursorVersion)
	buf = binary.BigEndian.AppendUint64(buf, uint64(createdAt.UnixNano()))
	buf = append(buf, id...)
	buf = append(buf, c.mac(owner, buf)...)
	return cursorEncoding.EncodeToString(buf)
}

// Decode verifies cursor for owner and returns the position it records. Any
// malformed, truncated, oversized, wrong-version or unauthenticated input
// (including a cursor issued for another owner or by another store) fails
// with an error wrapping ErrInvalidCursor. Decode never panics.
func (c *CursorCodec) Decode(owner, cursor string) (createdAt time.Time, id string, err error) {
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
	if !hmac.Equal(sum, c.mac(owner, payload)) {
		return time.Time{}, "", fmt.Errorf("%w: authentication failed", ErrInvalidCursor)
	}
	if payload[0] != CursorVersion {
		return time.Time{}, "", fmt.Errorf("%w: unknown version %d", ErrInvalidCursor, payload[0])
	}
	nanos := int64(binary.BigEndian.Uint64(payload[1:cursorHeaderLen]))
	return time.Unix(0, nanos).UTC(), string(payload[cursorHeaderLen:]), nil
}
