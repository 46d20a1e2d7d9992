package taskrouter

import (
	"context"
	"slices"
	"strings"

	"github.com/taskbridge/taskbridge/store"
)

// LabelCount is the number of active tasks whose labels have Values (in
// the order the labels were asked for).
type LabelCount struct {
	Values []string
	N      int
}

// ActiveByLabels counts the active tasks (working or input_required) of
// kind (the LabelKind label; "" counts every kind) by the values of labels:
// the operator's view of, say, how many workflow tasks still run on each
// workflow version. It pages through the store's query index (headers
// only) and reads at most max tasks; complete reports whether it counted
// every active task. Counts are sorted by their values.
func (r *Router) ActiveByLabels(ctx context.Context, kind string, labels []string, max int) (counts []LabelCount, complete bool, err error) {
	by := map[string]*LabelCount{}
	q := store.Query{Statuses: []store.Status{store.StatusWorking, store.StatusInputRequired}, Limit: store.MaxPageSize}
	read := 0
	for {
		page, err := r.st.Query(ctx, q)
		if err != nil {
			return nil, false, err
		}
		for _, t := range page.Tasks {
			read++
			if kind != "" && t.Labels[LabelKind] != kind {
				continue
			}
			vals := make([]string, len(labels))
			for i, l := range labels {
				vals[i] = t.Labels[l]
			}
			key := strings.Join(vals, "\x00")
			if by[key] == nil {
				by[key] = &LabelCount{Values: vals}
			}
			by[key].N++
		}
		if page.NextCursor == "" {
			complete = true
			break
		}
		if read >= max {
			break
		}
		q.Cursor = page.NextCursor
	}
	for _, c := range by {
		counts = append(counts, *c)
	}
	slices.SortFunc(counts, func(a, b LabelCount) int { return slices.Compare(a.Values, b.Values) })
	return counts, complete, nil
}
