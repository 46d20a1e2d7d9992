package postgres

import (
	"context"
	"strconv"
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Counts returns the number of tasks by status: the sum of the status's 16
// counter rows, 80 rows in all, whatever the number of tasks; see
// store.Store.
func (s *Store) Counts(ctx context.Context) (map[mcptask.Status]int, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	out, err := s.counts(ctx)
	if err != nil {
		return nil, s.fail("counts", err)
	}
	return out, nil
}

func (s *Store) counts(ctx context.Context) (map[mcptask.Status]int, error) {
	rows, err := s.pool.Query(ctx, s.sql.counts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := store.NewCounts()
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[mcptask.Status(st)] = int(n)
	}
	return out, rows.Err()
}

// sqlArgs numbers the arguments of a statement being built.
type sqlArgs []any

func (a *sqlArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// scanSQL builds a newest-first (oldest-first when oldest) keyset scan
// over one index: one branch per
// predicate (each an index range: the owner, the name, or one status),
// merged with UNION ALL when there are several, every branch and the whole
// limited to limit rows.
func (s *Store) scanSQL(cols string, preds []string, after *[2]any, limit int, oldest bool, args *sqlArgs) string {
	lim := args.add(limit)
	cmp, dir := "<", "DESC"
	if oldest {
		cmp, dir = ">", "ASC"
	}
	keyset := ""
	if after != nil {
		keyset = " AND (t.created_at, t.id) " + cmp + " (" + args.add(after[0]) + ", " + args.add(after[1]) + ")"
	}
	branch := func(pred string) string {
		return "SELECT " + cols + " FROM " + s.sql.quoted + ".tasks t WHERE " + pred + keyset +
			" ORDER BY t.created_at " + dir + ", t.id " + dir + " LIMIT " + lim
	}
	if len(preds) == 1 {
		return branch(preds[0])
	}
	parts := make([]string, len(preds))
	for i, p := range preds {
		parts[i] = "(" + branch(p) + ")"
	}
	return "SELECT * FROM (" + strings.Join(parts, " UNION ALL ") + ") u ORDER BY created_at " + dir + ", id " + dir + " LIMIT " + lim
}

// Query returns one page of tasks across owners, newest first (oldest
// first with q.Oldest); see store.Store. It drives the page from the index store.PlanQuery picks
// (tasks_owner, tasks_name, or tasks_status with one range per wanted
// status; tasks_created when no filter is set). When that index covers
// every filter, one query returns the page. Otherwise it scans the index
// in chunks of light rows (id, time, owner, name, status), filters them in
// Go, stops after store.QueryScanBudget rows, and then reads the headers
// of the matches.
func (s *Store) Query(ctx context.Context, q store.Query) (store.Page, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return store.Page{}, err
	}
	q, err = store.NormalizeQuery(q)
	if err != nil {
		return store.Page{}, err
	}
	var after *[2]any
	if q.Cursor != "" {
		at, id, err := s.codec.DecodeQuery(q, q.Cursor)
		if err != nil {
			return store.Page{}, err
		}
		after = &[2]any{at.UnixNano(), []byte(id)}
	}
	var counts map[mcptask.Status]int
	if len(q.Statuses) > 0 && (q.Owner != "" || q.Name != "") {
		if counts, err = s.counts(ctx); err != nil {
			return store.Page{}, s.fail("query", err)
		}
	}
	var (
		args    sqlArgs
		preds   []string
		covered bool
	)
	switch store.PlanQuery(q, counts) {
	case store.ByOwner:
		preds = []string{"t.owner = " + args.add([]byte(q.Owner))}
		covered = q.Name == "" && len(q.Statuses) == 0
	case store.ByName:
		preds = []string{"t.name = " + args.add([]byte(q.Name))}
		covered = q.Owner == "" && len(q.Statuses) == 0
	default:
		for _, st := range q.Statuses {
			preds = append(preds, "t.status = "+args.add(string(st)))
		}
		if len(preds) == 0 {
			preds = []string{"TRUE"}
		}
		covered = q.Owner == "" && q.Name == ""
	}
	if covered {
		return s.queryCovered(ctx, q, preds, after, args)
	}
	return s.queryFiltered(ctx, q, preds, after, args)
}

// queryCovered reads a page whose every row matches: limit+1 headers, the
// extra one telling whether there is a next page.
func (s *Store) queryCovered(ctx context.Context, q store.Query, preds []string, after *[2]any, args sqlArgs) (store.Page, error) {
	sql := s.scanSQL(headerCols, preds, after, q.Limit+1, q.Oldest, &args)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return store.Page{}, s.fail("query", err)
	}
	tasks, err := scanAll(rows, false)
	if err != nil {
		return store.Page{}, s.fail("query", err)
	}
	var page store.Page
	if len(tasks) > q.Limit {
		tasks = tasks[:q.Limit]
		last := tasks[q.Limit-1]
		page.NextCursor = s.codec.EncodeQuery(q, last.CreatedAt, last.ID)
	}
	page.Tasks = tasks
	return page, nil
}

// queryFiltered scans the driving index in chunks and filters in Go; see
// Query.
func (s *Store) queryFiltered(ctx context.Context, q store.Query, preds []string, after *[2]any, base sqlArgs) (store.Page, error) {
	budget := store.QueryScanBudget(q.Limit)
	chunk := min(budget, max(4*q.Limit, 500))
	type light struct {
		id          []byte
		at          int64
		owner, name []byte
		status      string
	}
	var (
		matched  [][]byte
		examined int
		last     light
		more     bool // entries remain after last
	)
scan:
	for {
		args := append(sqlArgs(nil), base...)
		sql := s.scanSQL("t.id, t.created_at, t.owner, t.name, t.status", preds, after, chunk, q.Oldest, &args)
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return store.Page{}, s.fail("query", err)
		}
		var batch []light
		for rows.Next() {
			var l light
			if err := rows.Scan(&l.id, &l.at, &l.owner, &l.name, &l.status); err != nil {
				rows.Close()
				return store.Page{}, s.fail("query", err)
			}
			batch = append(batch, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return store.Page{}, s.fail("query", err)
		}
		for i, l := range batch {
			last = l
			examined++
			if q.Match(&store.Task{Owner: string(l.owner), Status: mcptask.Status(l.status), Request: store.Request{Name: string(l.name)}}) {
				matched = append(matched, l.id)
			}
			if len(matched) == q.Limit || examined == budget {
				more = i < len(batch)-1 || len(batch) == chunk
				break scan
			}
		}
		if len(batch) < chunk {
			break // the index range is exhausted
		}
		after = &[2]any{last.at, last.id}
	}
	var page store.Page
	if len(matched) > 0 {
		rows, err := s.pool.Query(ctx, "SELECT "+headerCols+" FROM "+s.sql.quoted+".tasks t WHERE t.id = ANY($1)", matched)
		if err != nil {
			return store.Page{}, s.fail("query", err)
		}
		tasks, err := scanAll(rows, false)
		if err != nil {
			return store.Page{}, s.fail("query", err)
		}
		byID := make(map[string]*store.Task, len(tasks))
		for _, t := range tasks {
			byID[t.ID] = t
		}
		for _, id := range matched {
			// A task deleted or changed since the scan is left out.
			if t, ok := byID[string(id)]; ok && q.Match(t) {
				page.Tasks = append(page.Tasks, t)
			}
		}
	}
	if more {
		page.NextCursor = s.codec.EncodeQuery(q, nanos(last.at), string(last.id))
	}
	return page, nil
}
