package workers

import (
	"errors"
	"sort"
)

// Reconcile makes the workers a discovery source added equal to desired
// (the source's whole current list): a listed worker that is new is added
// (it starts down and takes traffic once a health check passes, like any
// added worker), one no longer listed is removed, one listed with another
// URL, role or bootstrap port is removed and added again. Workers of the
// plan and those the admin API added are not the source's and are left
// alone. It returns the names added and removed; a worker that could not be
// added (a name taken by another worker, an invalid spec) is skipped and
// named in the error, the rest applies.
func (f *Fleet) Reconcile(desired []ExternalWorker) (added, removed []string, err error) {
	f.reconcileMu.Lock()
	defer f.reconcileMu.Unlock()
	if f.discovered == nil {
		f.discovered = map[string]ExternalWorker{}
	}
	want := make(map[string]ExternalWorker, len(desired))
	for _, x := range desired {
		want[x.Name] = x
	}
	var errs []error
	for name, had := range f.discovered {
		if x, ok := want[name]; ok && x == had {
			continue
		}
		if err := f.RemoveWorker(name); err != nil && !errors.Is(err, ErrUnknownWorker) {
			errs = append(errs, err)
			continue
		}
		delete(f.discovered, name)
		removed = append(removed, name)
	}
	for _, x := range desired {
		if _, ok := f.discovered[x.Name]; ok {
			continue
		}
		if err := f.AddWorker(x); err != nil {
			errs = append(errs, err)
			continue
		}
		f.discovered[x.Name] = x
		added = append(added, x.Name)
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed, errors.Join(errs...)
}
