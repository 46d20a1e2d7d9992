// Package tokenauth gives the example servers bearer-token authentication
// from a static token list, so that task owners can be exercised against
// real binaries: each token maps to a user id, which becomes the owner of
// the tasks its requests create.
//
// The list is "TOKEN=USER[,TOKEN=USER...]", from a flag or the environment
// variable TASKBRIDGE_TOKENS. It is meant for examples and tests; a
// production server verifies tokens with its authorization server.
package tokenauth

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// EnvTokens is the environment variable read when no list is given.
const EnvTokens = "TASKBRIDGE_TOKENS"

// Parse reads a token list "TOKEN=USER[,TOKEN=USER...]". An empty list is
// nil, no error.
func Parse(spec string) (map[string]string, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(spec, ",") {
		token, user, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || token == "" || user == "" {
			return nil, fmt.Errorf("token list entry %q: want TOKEN=USER", pair)
		}
		if _, dup := out[token]; dup {
			return nil, fmt.Errorf("token list: a token is listed twice")
		}
		out[token] = user
	}
	return out, nil
}

// Verifier checks a bearer token against tokens (token -> user id) in
// constant time per entry.
func Verifier(tokens map[string]string) auth.TokenVerifier {
	return func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user := ""
		for t, u := range tokens {
			if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
				user = u
			}
		}
		if user == "" {
			return nil, fmt.Errorf("unknown bearer token: %w", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
}

// Middleware returns the HTTP middleware that requires one of tokens, or
// nil when tokens is empty (no authentication).
func Middleware(tokens map[string]string) func(http.Handler) http.Handler {
	if len(tokens) == 0 {
		return nil
	}
	return auth.RequireBearerToken(Verifier(tokens), nil)
}
