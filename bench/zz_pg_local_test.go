package main

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestLocalPG(t *testing.T) {
	if os.Getenv("LOCALPG") == "" {
		t.Skip()
	}
	pg, stop, err := startPostgres("trace")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	os.WriteFile("/tmp/speed/pgurl", []byte(pg.URL("trace")), 0o644)
	fmt.Println(pg.URL("trace"))
	time.Sleep(20 * time.Minute)
}
