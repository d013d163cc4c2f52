package backendtest_test

import (
	"context"
	"errors"

	"github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/quota"
)

// clusterQuotas gives every node of a cluster the same quotas, as a
// SIGHUP of each process does; usage is the cluster's, read on the first.
type clusterQuotas []*node.Node

func (c clusterQuotas) SetQuotas(q *quota.Config) error {
	var errs []error
	for _, n := range c {
		errs = append(errs, n.SetQuotas(q))
	}
	return errors.Join(errs...)
}

func (c clusterQuotas) Quotas(ctx context.Context) ([]quota.Usage, error) {
	return c[0].Quotas(ctx)
}
