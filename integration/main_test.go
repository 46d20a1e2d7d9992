package integration

import (
	"testing"

	"github.com/taskbridge/taskbridge/internal/pgtest"
)

// TestMain lets the replica tests share one throwaway PostgreSQL (started
// on first use, stopped when the tests end).
func TestMain(m *testing.M) { pgtest.Main(m) }
