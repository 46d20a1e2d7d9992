package bboltstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "taskbridge-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := bboltstore.Open(filepath.Join(dir, "tasks.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	t, err := s.Create(ctx, &store.Task{
		ID:        "task-1",
		Owner:     "session-a",
		Status:    mcptask.StatusWorking,
		CreatedAt: time.Now(),
		TTL:       time.Hour,
		Request:   store.Request{Method: "tools/call", Name: "echo"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Status, t.Version)

	t, err = s.Update(ctx, "task-1", store.Update{Status: mcptask.StatusCompleted, Result: []byte(`{"content":[]}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Status, t.Version)
	// Output:
	// working 1
	// completed 2
}
