// Package dashboard is an operator's web dashboard over a taskbridge
// router's tasks: counts by status, tasks created and finished per
// minute, the oldest working task, a filtered and paged task table, and
// a page per task with its status history, variables, workflow timeline,
// result or error, its event log as it happens (status changes, step
// attempts, the progress and log lines its work reports) and a cancel
// button. Pages are rendered on the server
// (html/template, assets embedded; a small hand-written script keeps them
// live) and update without reload through server-sent events.
//
// The dashboard is a function of the router, New(router, Options), not a
// method of taskrouter.Router: it imports taskrouter and workflow, so a
// method would be an import cycle.
//
//	feed := dashboard.NewFeed()                       // the router's observer for live pages
//	srv, _ := builder.New("demo", "1").WithObserver(feed).Build(ctx)
//	d, _ := dashboard.New(srv.Router, &dashboard.Options{Token: adminToken, Feed: feed})
//	defer d.Close()
//	mux.Handle("/dashboard/", d)
//
// # Access
//
// Off by default: without Options.Token or Options.Authenticate every
// request gets 404. A request is let in by Token (an admin who may cancel)
// or by Authenticate, which returns the Viewer: a name, the task owner
// whose tasks the viewer sees, whether the viewer is an admin (sees every
// task, may filter by owner, sees the store-wide counts and rates) and
// whether the viewer may cancel. A non-admin sees only tasks whose owner
// is exactly Viewer.Owner, in the engine's owner strings: with
// taskrouter.DefaultOwner a bearer-token user is "user:<UserID>". Any other
// task is "not found", on its page, in the table, on the event stream.
//
// Browsers sign in with the token once (the login form sets an HttpOnly,
// SameSite=Strict cookie holding it, scoped to the dashboard's path);
// programs send "Authorization: Bearer <token>". TokenFrom reads either,
// TokenViewers maps tokens to viewers.
//
// Cancelling is a POST with a per-viewer form token (an HMAC under a
// random per-process secret) from the same origin (Origin and
// Sec-Fetch-Site are checked when the browser sends them); it goes through
// Router.CancelTask once the viewer may see the task, so the task is
// marked cancelled and its handler's context is cancelled. Every response
// carries a strict Content-Security-Policy, no-store caching and no
// referrer to other sites.
//
// # Operations
//
// A viewer who may cancel a workflow task may also pause it (with a
// reason, optionally stopping its running steps) and resume it, in the
// same way (Router.Pauses: Pause, Resume); the page says who
// paused it and since when, draws a step waiting for a place on its queue
// as queued (why, from the progress), and lists the task's actions. The
// schedules page lists the schedules a viewer manages (an admin: all;
// another viewer: those its Owner owns) with their next firing, latest
// fires and history, and pauses, resumes and fires them; an admin also
// sees each queue's holding and waiting runs.
//
// # Live updates
//
// A Feed is a taskrouter.Observer: every committed change this process
// makes reaches the pages watching within milliseconds. With a shared
// store (store.Notifier, PostgreSQL) the dashboard also subscribes to the
// store's change feed, so changes by other replicas arrive too (to
// non-admin pages as a bare "refresh", since their owner is not known
// without a read). With neither, pages refresh every five seconds.
//
// A task's page also follows the task's own event log
// (taskrouter.Streams.Events, on any replica through the store's
// event feed): GET {prefix}/tasks/{id}/events streams each event as a
// server-sent event whose id is its sequence number, so the browser
// resumes after the last one it had when it reconnects.
//
// # Scale
//
// The table pages through store.Query (newest first, bounded index work
// per call); the oldest working task is the first entry of an oldest-first
// query (store.Query.Oldest) on the status index; counts are the store's
// O(1) counters. No request scans the whole store, so pages stay fast at a
// million stored tasks.
package dashboard
