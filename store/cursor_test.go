package store

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestCursorRoundTrip(t *testing.T) {
	c := NewCursorCodec(testKey)
	for _, tc := range []struct {
		owner string
		at    time.Time
		id    string
	}{
		{"alice", time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), "task-1"},
		{"", time.Unix(0, 0), ""},
		{"o\x00\xff", time.Unix(-1e9, -1), "id\x00\xff"},
		{"bob", time.Date(1700, 1, 1, 0, 0, 0, 1, time.UTC), strings.Repeat("i", MaxIDBytes)},
	} {
		s := c.Encode(tc.owner, tc.at, tc.id)
		require.LessOrEqual(t, len(s), MaxCursorLen)
		at, id, err := c.Decode(tc.owner, s)
		require.NoError(t, err)
		require.True(t, at.Equal(tc.at), "%v != %v", at, tc.at)
		require.Equal(t, tc.id, id)
		require.Equal(t, s, c.Encode(tc.owner, at, id), "encoding is deterministic")

		_, _, err = c.Decode(tc.owner+"x", s)
		require.ErrorIs(t, err, ErrInvalidCursor, "another owner")
		_, _, err = NewCursorCodec([]byte("another key")).Decode(tc.owner, s)
		require.ErrorIs(t, err, ErrInvalidCursor, "another key")
	}
}

func TestCursorRejects(t *testing.T) {
	c := NewCursorCodec(testKey)
	good := c.Encode("alice", time.Unix(100, 5), "t1")
	raw, err := base64.RawURLEncoding.DecodeString(good)
	require.NoError(t, err)

	// A correctly authenticated payload with another version byte.
	wrongVersion := append([]byte{CursorVersion + 1}, raw[1:len(raw)-cursorMACLen]...)
	wrongVersion = append(wrongVersion, c.mac("alice", wrongVersion)...)
	// A correctly authenticated payload that is too short.
	short := []byte{CursorVersion, 1, 2}
	short = append(short, c.mac("alice", short)...)

	for name, s := range map[string]string{
		"empty":         "",
		"padding":       good + "==",
		"newline":       good[:4] + "\n" + good[4:],
		"std alphabet":  strings.NewReplacer("-", "+", "_", "/").Replace(good) + "+/",
		"truncated":     good[:len(good)-2],
		"one char":      "A",
		"oversized":     strings.Repeat("A", MaxCursorLen+1),
		"wrong version": base64.RawURLEncoding.EncodeToString(wrongVersion),
		"short payload": base64.RawURLEncoding.EncodeToString(short),
		"bad tail bits": good[:len(good)-1] + string(flipLowBit(good[len(good)-1])),
	} {
		_, _, err := c.Decode("alice", s)
		require.ErrorIs(t, err, ErrInvalidCursor, name)
	}
	// Every single-bit flip is rejected.
	for i := range raw {
		for bit := range 8 {
			b := append([]byte(nil), raw...)
			b[i] ^= 1 << bit
			_, _, err := c.Decode("alice", base64.RawURLEncoding.EncodeToString(b))
			require.ErrorIs(t, err, ErrInvalidCursor)
		}
	}
}

// flipLowBit changes a base64url character to one whose value differs in
// the lowest bit (which, in the last character, is a padding bit).
func flipLowBit(ch byte) byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, ch)
	return alphabet[i^1]
}

func FuzzCursorDecode(f *testing.F) {
	c := NewCursorCodec(testKey)
	good := c.Encode("alice", time.Unix(100, 5), "t1")
	f.Add("alice", good)
	f.Add("bob", good)
	f.Add("alice", good[:len(good)-1])
	f.Add("alice", good+"A")
	f.Add("", c.Encode("", time.Unix(0, 0), ""))
	f.Add("alice", "")
	f.Add("alice", "====")
	f.Add("alice", strings.Repeat("_", 600))
	f.Fuzz(func(t *testing.T, owner, cursor string) {
		at, id, err := c.Decode(owner, cursor)
		if err != nil {
			if !errors.Is(err, ErrInvalidCursor) {
				t.Fatalf("error %v does not wrap ErrInvalidCursor", err)
			}
			return
		}
		// Accepted: it must be exactly what Encode produces for this owner.
		if again := c.Encode(owner, at, id); again != cursor {
			t.Fatalf("accepted %q for owner %q, but Encode gives %q", cursor, owner, again)
		}
		if cursor == good && owner != "alice" {
			t.Fatalf("cursor for alice accepted for %q", owner)
		}
	})
}

func TestQueryCursor(t *testing.T) {
	c := NewCursorCodec(testKey)
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	norm := func(q Query) Query {
		q, err := NormalizeQuery(q)
		require.NoError(t, err)
		return q
	}
	q := norm(Query{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusFailed}, Name: "tool", Owner: "alice"})
	s := c.EncodeQuery(q, at, "id-1")
	got, id, err := c.DecodeQuery(q, s)
	require.NoError(t, err)
	require.True(t, got.Equal(at))
	require.Equal(t, "id-1", id)

	// The same filters in another order, and another page size, decode.
	_, _, err = c.DecodeQuery(norm(Query{Statuses: []mcptask.Status{mcptask.StatusFailed, mcptask.StatusWorking, mcptask.StatusWorking}, Name: "tool", Owner: "alice", Limit: 7}), s)
	require.NoError(t, err)
	// Other filters do not, nor does the cursor as a List cursor of any
	// owner, nor a List cursor as a Query cursor.
	for _, other := range []Query{
		{Statuses: []mcptask.Status{mcptask.StatusWorking}, Name: "tool", Owner: "alice"},
		{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusFailed}, Name: "tool"},
		{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusFailed}, Owner: "alice"},
		{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusFailed}, Name: "toolalice"},
		{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusFailed}, Name: "", Owner: "toolalice"},
		{},
	} {
		_, _, err := c.DecodeQuery(norm(other), s)
		require.ErrorIs(t, err, ErrInvalidCursor, "%+v", other)
	}
	_, _, err = c.Decode(queryKey(q), s)
	require.ErrorIs(t, err, ErrInvalidCursor)
	empty := norm(Query{})
	list := c.Encode(queryKey(empty), at, "id-1")
	_, _, err = c.DecodeQuery(empty, list)
	require.ErrorIs(t, err, ErrInvalidCursor)
}
