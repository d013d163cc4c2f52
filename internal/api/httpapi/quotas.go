package httpapi

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/quota"
)

// quotasAnswer is GET /quotas: every quota's key count and limits, in the
// quotas file's order, then the default's namespaces that hold keys.
type quotasAnswer struct {
	Enabled bool          `json:"enabled"` // --quotas is set
	Quotas  []quota.Usage `json:"quotas"`
}

func (h *Handler) quotas(w http.ResponseWriter, r *http.Request) error {
	a := quotasAnswer{Quotas: []quota.Usage{}}
	if h.opts.Quotas != nil {
		us, err := h.opts.Quotas(r.Context())
		if err != nil {
			return err
		}
		if us != nil {
			a.Enabled, a.Quotas = true, us
		}
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// quotaCollector exports the quotas' usage and limits on each scrape.
type quotaCollector struct {
	usage func(ctx context.Context) ([]quota.Usage, error)
}

var (
	quotaKeysDesc = prometheus.NewDesc("counterd_quota_keys",
		"Keys counted under a quota (--quotas); the default quota is counted per namespace.", []string{"quota", "namespace"}, nil)
	quotaLimitDesc = prometheus.NewDesc("counterd_quota_limit",
		"A quota's limit (max_keys or max_hash_fields); absent when not bounded.", []string{"quota", "namespace", "limit"}, nil)
)

func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- quotaKeysDesc
	ch <- quotaLimitDesc
}

func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	us, err := c.usage(context.Background())
	if err != nil {
		return
	}
	for _, u := range us {
		ch <- prometheus.MustNewConstMetric(quotaKeysDesc, prometheus.GaugeValue, float64(u.Keys), u.Quota, u.Namespace)
		if u.MaxKeys != 0 {
			ch <- prometheus.MustNewConstMetric(quotaLimitDesc, prometheus.GaugeValue, float64(u.MaxKeys), u.Quota, u.Namespace, "max_keys")
		}
		if u.MaxHashFields != 0 {
			ch <- prometheus.MustNewConstMetric(quotaLimitDesc, prometheus.GaugeValue, float64(u.MaxHashFields), u.Quota, u.Namespace, "max_hash_fields")
		}
	}
}
