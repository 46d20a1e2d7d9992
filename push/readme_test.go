package push_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/push"
)

// readmePush returns the README's "Push" section.
func readmePush(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	s := string(b)
	start := strings.Index(s, "\n## Push\n")
	require.Positive(t, start, "the README has a Push section")
	end := strings.Index(s[start+1:], "\n## ")
	require.Positive(t, end)
	return s[start : start+1+end]
}

// block returns the first fenced block after marker in s.
func block(t *testing.T, s, marker string) string {
	t.Helper()
	i := strings.Index(s, marker)
	require.GreaterOrEqual(t, i, 0, "marker %q", marker)
	s = s[i:]
	open := strings.Index(s, "```")
	require.GreaterOrEqual(t, open, 0)
	s = s[open:]
	s = s[strings.Index(s, "\n")+1:]
	end := strings.Index(s, "```")
	require.GreaterOrEqual(t, end, 0)
	return s[:end]
}

// TestShellVerifyInREADME runs the README's shell one-liner (openssl) on
// a delivery signed now: it says verified; on a tampered body, a wrong
// secret or a stale timestamp it fails.
func TestShellVerifyInREADME(t *testing.T) {
	for _, tool := range []string{"sh", "openssl", "base64", "od"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	line := strings.TrimSpace(block(t, readmePush(t), "<!-- push-verify-sh"))
	require.NotContains(t, line, "\n", "one line")
	secret := push.NewSecret()
	body := []byte(`{"id":"whd_1","type":"terminal","note":"quotes ' and \" and %s"}` + "\n")
	// check runs the line on a body file, with the headers of a delivery
	// of body signed with signer at ts, checked with secret.
	check := func(signer, secret string, ts time.Time, file []byte) (string, error) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "body.json"), file, 0o600))
		sig, err := push.Sign(signer, "whd_1", ts, body)
		require.NoError(t, err)
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "ID=whd_1", "TS="+strconv.FormatInt(ts.Unix(), 10), "SIG=v1,AAAA "+sig, "SECRET="+secret)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := check(secret, secret, time.Now(), body)
	require.NoError(t, err, out)
	require.Equal(t, "verified\n", out)
	out, err = check(secret, secret, time.Now(), append([]byte("x"), body...))
	require.Error(t, err)
	require.Contains(t, out, "forged")
	out, err = check(push.NewSecret(), secret, time.Now(), body)
	require.Error(t, err)
	require.Contains(t, out, "forged")
	_, err = check(secret, secret, time.Now().Add(-time.Hour), body)
	require.Error(t, err, "a replay an hour later")
}

// TestREADMEDelivery: the README's example delivery verifies with the
// secret its `webhook add` printed.
func TestREADMEDelivery(t *testing.T) {
	sec := readmePush(t)
	secret := ""
	for _, l := range strings.Split(sec, "\n") {
		if rest, ok := strings.CutPrefix(l, "secret:   "); ok {
			secret = rest
		}
	}
	require.NotEmpty(t, secret)
	i := strings.Index(sec, "POST /taskbridge HTTP/1.1\n")
	require.Positive(t, i)
	req, _, _ := strings.Cut(sec[i:], "\n```")
	head, body, ok := strings.Cut(req, "\n\n")
	require.True(t, ok)
	h := http.Header{}
	for _, l := range strings.Split(head, "\n")[1:] {
		k, v, ok := strings.Cut(l, ": ")
		require.True(t, ok, l)
		h.Set(k, v)
	}
	ts, err := strconv.ParseInt(h.Get(push.HeaderTimestamp), 10, 64)
	require.NoError(t, err)
	require.NoError(t, push.Verify(secret, h, []byte(body), time.Unix(ts, 0), 0))
}
