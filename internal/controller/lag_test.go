package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestLagUnknownStatus: a worker that replays but has not read the
// source's newest position yet reports its lag unknown; the SyncTask's
// status says so (Lag column "unknown", lagUnknown naming the worker and
// why), is not Ready on it, and exports no lag series, instead of a lag
// of 0 that reads as caught up. A known lag, 0 included, shows as before.
func TestLagUnknownStatus(t *testing.T) {
	unknown := streaming(0, 0, 100)
	unknown.Replay.LagUnknown = "the source's newest position is not read yet"
	for _, tc := range []struct {
		name          string
		report        *workerapi.Status
		lag, ready    string
		unknownPrefix string
		lagSeries     int
	}{
		{"unknown", unknown, "unknown", "False/" + syncv1alpha1.ReasonLagUnknown, "orders-worker-0: the source's newest position is not read yet", 0},
		{"caught up", streaming(0, 10, 100), "0s", "True/" + syncv1alpha1.ReasonStreaming, "", 2},
		{"behind", streaming(82, 10, 100), "82s", "False/" + syncv1alpha1.ReasonLagging, "", 2},
		{"copying", copying(10, 100), "", "", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := observed{generation: 1, now: statusNow, mode: config.ModeFullAndIncremental, workers: []workerObservation{worker(0, tc.report)}}
			st := computeStatus(&syncv1alpha1.SyncTaskStatus{}, o)
			if st.Lag != tc.lag || st.LagUnknown != tc.unknownPrefix {
				t.Errorf("lag %q, lagUnknown %q; want %q, %q", st.Lag, st.LagUnknown, tc.lag, tc.unknownPrefix)
			}
			if tc.unknownPrefix != "" && (st.Shards[0].LagUnknown == "" || st.LagSeconds != 0) {
				t.Errorf("shard lagUnknown %q, lagSeconds %d", st.Shards[0].LagUnknown, st.LagSeconds)
			}
			if c := meta.FindStatusCondition(st.Conditions, syncv1alpha1.ConditionReady); tc.ready != "" && (c == nil || string(c.Status)+"/"+c.Reason != tc.ready) {
				t.Errorf("Ready %+v, want %s", c, tc.ready)
			} else if tc.unknownPrefix != "" && !strings.Contains(c.Message, "not known yet") {
				t.Errorf("Ready message %q", c.Message)
			}
			ch := make(chan prometheus.Metric, 100)
			collectSyncTask(ch, &syncv1alpha1.SyncTask{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders"}, Status: st})
			close(ch)
			n := 0
			for m := range ch {
				if d := m.Desc().String(); strings.Contains(d, `"mongoferry_synctask_lag_seconds"`) || strings.Contains(d, `"mongoferry_synctask_shard_lag_seconds"`) {
					n++
				}
			}
			if n != tc.lagSeries {
				t.Errorf("%d lag series, want %d", n, tc.lagSeries)
			}
		})
	}
}
