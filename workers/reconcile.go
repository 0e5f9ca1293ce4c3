package workers

import (
	"errors"
	"sort"
)

// Reconcile makes the workers the discovery source named source added
// equal to desired (the source's whole current list): a listed worker that is new is added
// (it starts down and takes traffic once a health check passes, like any
// added worker), one no longer listed is removed, one listed with another
// URL, role or bootstrap port is removed and added again. Workers of the
// plan and those the admin API added are not the source's and are left
// alone, and so are other sources'. It returns the names added and removed; a worker that could not be
// added (a name taken by another worker, an invalid spec) is skipped and
// named in the error, the rest applies.
func (f *Fleet) Reconcile(source string, desired []ExternalWorker) (added, removed []string, err error) {
	f.reconcileMu.Lock()
	defer f.reconcileMu.Unlock()
	if f.discovered == nil {
		f.discovered = map[string]map[string]ExternalWorker{}
	}
	mine := f.discovered[source]
	if mine == nil {
		mine = map[string]ExternalWorker{}
		f.discovered[source] = mine
	}
	want := make(map[string]ExternalWorker, len(desired))
	for _, x := range desired {
		want[x.Name] = x
	}
	var errs []error
	for name, had := range mine {
		if x, ok := want[name]; ok && x == had {
			continue
		}
		if err := f.RemoveWorker(name); err != nil && !errors.Is(err, ErrUnknownWorker) {
			errs = append(errs, err)
			continue
		}
		delete(mine, name)
		removed = append(removed, name)
	}
	for _, x := range desired {
		if _, ok := mine[x.Name]; ok {
			continue
		}
		if err := f.AddWorker(x); err != nil {
			errs = append(errs, err)
			continue
		}
		mine[x.Name] = x
		added = append(added, x.Name)
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed, errors.Join(errs...)
}
