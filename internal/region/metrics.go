package region

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns the replication metrics of every peer link, computed
// from Status at each scrape.
func (r *Replicator) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Replicator }

var (
	mLag       = prometheus.NewDesc("counterd_region_lag_seconds", "Age of the oldest change of this region the peer region has not acknowledged (0: none pending).", []string{"peer"}, nil)
	mPending   = prometheus.NewDesc("counterd_region_pending_changes", "Counters changed in this region that the peer region has not acknowledged.", []string{"peer"}, nil)
	mContact   = prometheus.NewDesc("counterd_region_last_contact_timestamp_seconds", "Unix time of the last push exchanged with the peer region, either way (0: never).", []string{"peer"}, nil)
	mStaleness = prometheus.NewDesc("counterd_region_staleness_seconds", "Age of the as-of of the peer region's last complete push: how stale global reads are for it (-1: nothing received yet).", []string{"peer"}, nil)
	mBytesSent = prometheus.NewDesc("counterd_region_bytes_sent_total", "Bytes of delta batches pushed to the peer region and acknowledged.", []string{"peer"}, nil)
	mBytesRecv = prometheus.NewDesc("counterd_region_bytes_received_total", "Bytes received from the peer region (pushes and bootstrap).", []string{"peer"}, nil)
	mPushes    = prometheus.NewDesc("counterd_region_pushes_total", "Pushes to the peer region by result.", []string{"peer", "result"}, nil)
	mCompared  = prometheus.NewDesc("counterd_region_sync_chunks_compared_total", "Chunks compared by hash in anti-entropy with the peer region.", []string{"peer"}, nil)
	mFetched   = prometheus.NewDesc("counterd_region_sync_chunks_fetched_total", "Chunks fetched (they differed) in anti-entropy with the peer region.", []string{"peer"}, nil)
	mSyncBytes = prometheus.NewDesc("counterd_region_sync_bytes_total", "Bytes fetched in anti-entropy with the peer region (manifest, ranges and chunks).", []string{"peer"}, nil)
	mSyncFull  = prometheus.NewDesc("counterd_region_sync_full_bytes_total", "Bytes full copies would have moved in the same anti-entropy rounds.", []string{"peer"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mLag, mPending, mContact, mStaleness, mBytesSent, mBytesRecv, mPushes, mCompared, mFetched, mSyncBytes, mSyncFull} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, name := range c.r.peerNames() {
		ps := c.r.peerStatus(c.r.peers[name], now)
		lag, n, contact := ps.LagSeconds, ps.Pending, ps.contact
		stale := -1.0
		if ps.asOf != 0 {
			stale = max(0, now.Sub(time.Unix(0, ps.asOf)).Seconds())
		}
		ok, failed := ps.Pushes, ps.PushErrors
		sent, recv := ps.BytesSent, ps.BytesReceived
		cmp, fet, sb, sf := ps.ChunksCompared, ps.ChunksFetched, ps.SyncBytes, ps.SyncFullBytes
		ts := 0.0
		if !contact.IsZero() {
			ts = float64(contact.UnixNano()) / 1e9
		}
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
		}
		k := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
		}
		g(mLag, lag)
		g(mPending, float64(n))
		g(mContact, ts)
		g(mStaleness, stale)
		k(mBytesSent, sent)
		k(mBytesRecv, recv)
		ch <- prometheus.MustNewConstMetric(mPushes, prometheus.CounterValue, float64(ok), name, "ok")
		ch <- prometheus.MustNewConstMetric(mPushes, prometheus.CounterValue, float64(failed), name, "error")
		k(mCompared, cmp)
		k(mFetched, fet)
		k(mSyncBytes, sb)
		k(mSyncFull, sf)
	}
}
