package workflow

import (
	"testing"

	"github.com/taskbridge/taskbridge/internal/tests/doctest"
)

// TestDocFileMap: doc.go's "# Files" section names every file of the
// package (tests aside), and every file it names exists.
func TestDocFileMap(t *testing.T) { doctest.FileMap(t, ".") }
