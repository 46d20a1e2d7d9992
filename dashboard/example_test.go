package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/dashboard"
	"github.com/taskbridge/taskbridge/store/memory"
)

// Mounting the dashboard: the Feed observes the router (live pages,
// rates), Authenticate maps bearer tokens to viewers; here an admin token
// and one user who sees only the tasks they own.
func Example() {
	ctx := context.Background()
	feed := dashboard.NewFeed()
	srv, err := builder.New("demo", "1").WithStore(memory.New(nil)).WithoutEnv().WithObserver(feed).Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	d, err := dashboard.New(srv.Router, &dashboard.Options{
		Token: "admin-token",
		Feed:  feed,
		Authenticate: dashboard.TokenViewers(map[string]dashboard.Viewer{
			"alice-token": {Name: "alice", Owner: "user:alice", CanCancel: true},
		}),
	})
	defer d.Close() // before shutting the HTTP server down: ends the live streams
	mux := http.NewServeMux()
	mux.Handle("/dashboard/", d)
	web := httptest.NewServer(mux)
	defer web.Close()

	req, _ := http.NewRequest(http.MethodGet, web.URL+"/dashboard/", nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	resp, err := web.Client().Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(body), "user:alice"))
	// Output: 200 true
}
