package push_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/push"
)

// The test vector of the Standard Webhooks specification: a receiver
// written against any of its libraries verifies taskbridge's deliveries.
const (
	vecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTS     = 1614265330
	vecBody   = `{"test": 2432232314}`
	vecSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vecHeader(sig string) http.Header {
	h := http.Header{}
	h.Set(push.HeaderID, vecID)
	h.Set(push.HeaderTimestamp, strconv.Itoa(vecTS))
	h.Set(push.HeaderSignature, sig)
	return h
}

func TestSignMatchesStandardWebhooks(t *testing.T) {
	sig, err := push.Sign(vecSecret, vecID, time.Unix(vecTS, 0), []byte(vecBody))
	require.NoError(t, err)
	require.Equal(t, vecSig, sig)
}

func TestVerify(t *testing.T) {
	now := time.Unix(vecTS, 0).Add(time.Minute)
	body := []byte(vecBody)
	require.NoError(t, push.Verify(vecSecret, vecHeader(vecSig), body, now, 0))
	// A sender rotating its secret sends two signatures: one match will do.
	require.NoError(t, push.Verify(vecSecret, vecHeader("v1,AAAA "+vecSig), body, now, 0))

	require.ErrorIs(t, push.Verify(vecSecret, vecHeader(vecSig), []byte(`{"test": 2432232315}`), now, 0), push.ErrSignature)
	require.ErrorIs(t, push.Verify(push.NewSecret(), vecHeader(vecSig), body, now, 0), push.ErrSignature)
	require.ErrorIs(t, push.Verify(vecSecret, vecHeader("v2,"+strings.TrimPrefix(vecSig, "v1,")), body, now, 0), push.ErrSignature)
	// A replay an hour later, or a clock far ahead.
	require.ErrorIs(t, push.Verify(vecSecret, vecHeader(vecSig), body, now.Add(time.Hour), 0), push.ErrTimestamp)
	require.ErrorIs(t, push.Verify(vecSecret, vecHeader(vecSig), body, now.Add(-time.Hour), 0), push.ErrTimestamp)
	require.NoError(t, push.Verify(vecSecret, vecHeader(vecSig), body, now.Add(time.Hour), 2*time.Hour))

	h := vecHeader(vecSig)
	h.Del(push.HeaderID)
	require.ErrorIs(t, push.Verify(vecSecret, h, body, now, 0), push.ErrNoSignature)
	h = vecHeader(vecSig)
	h.Set(push.HeaderTimestamp, "yesterday")
	require.ErrorIs(t, push.Verify(vecSecret, h, body, now, 0), push.ErrNoSignature)
}

func TestSecrets(t *testing.T) {
	s := push.NewSecret()
	key, err := push.Key(s)
	require.NoError(t, err)
	require.Len(t, key, 32)
	require.NotEqual(t, s, push.NewSecret())
	for _, bad := range []string{"", "hunter2", "whsec_", "whsec_!!!", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 8)),
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))} {
		_, err := push.Key(bad)
		require.ErrorIs(t, err, push.ErrSecret, bad)
		_, err = push.Sign(bad, "id", time.Now(), nil)
		require.ErrorIs(t, err, push.ErrSecret, bad)
	}
}

func TestReceive(t *testing.T) {
	secret := push.NewSecret()
	body := []byte(`{"id":"whd_1","type":"terminal","webhookId":"wh_1","task":{"taskId":"t1","status":"completed","createdAt":"","lastUpdatedAt":"","ttl":null},"event":{"seq":3,"type":"status","at":"2026-01-01T00:00:00Z","data":{"status":"completed"}}}`)
	now := time.Now()
	sig, err := push.Sign(secret, "whd_1", now, body)
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
	req.Header.Set(push.HeaderID, "whd_1")
	req.Header.Set(push.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(push.HeaderSignature, sig)
	d, err := push.Receive(secret, req, now)
	require.NoError(t, err)
	require.Equal(t, "t1", d.Task.TaskID)
	require.EqualValues(t, 3, d.Event.Seq)

	// The body's id must be the header's (the signature binds the header).
	sig, _ = push.Sign(secret, "whd_2", now, body)
	req = httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
	req.Header.Set(push.HeaderID, "whd_2")
	req.Header.Set(push.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(push.HeaderSignature, sig)
	_, err = push.Receive(secret, req, now)
	require.ErrorIs(t, err, push.ErrSignature)
}
