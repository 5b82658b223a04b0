// Package grafana builds Peloton's Grafana dashboards with the Grafana
// foundation SDK. The JSON files beside this one are its output, committed
// so that operators import them as they are: `go generate ./deploy/grafana`
// (or `make dashboards`) writes them again after a change here, and a test
// fails while they differ.
package grafana

//lint:file-ignore SA1019 the SDK's v1 dashboard builder is deprecated in favour of dashboard v2, a schema of newer Grafana releases only; the committed JSON stays v1, which every Grafana imports.

//go:generate go run ./gen

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// ds is every query's data source: the dashboard's $datasource variable.
var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// q is one PromQL query with its legend.
type q struct{ expr, legend string }

func target(x q) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(ds).Expr(x.expr).LegendFormat(x.legend)
}

// series is a time series panel of width w (of 24) with the given unit.
func series(title, desc, unit string, w uint32, qs ...q) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(desc).Datasource(ds).
		Unit(unit).Span(w).Height(8).FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	for _, x := range qs {
		p = p.WithTarget(target(x))
	}
	return p
}

// stacked is a series panel whose series add up (hosts by zone, say).
func stacked(title, desc, unit string, w uint32, qs ...q) *timeseries.PanelBuilder {
	return series(title, desc, unit, w, qs...).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}

// single is a stat panel showing one number now.
func single(title, desc, unit string, w uint32, x q) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(desc).Datasource(ds).Unit(unit).Span(w).Height(8).
		WithTarget(target(x)).GraphMode(common.BigValueGraphModeArea)
}

func datasourceVar() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")
}

// labelVar is a multi-value variable over a label's values, "All" by default.
func labelVar(name, label, metric string) *dashboard.QueryVariableBuilder {
	query := fmt.Sprintf("label_values(%s, %s)", metric, label)
	return dashboard.NewQueryVariableBuilder(name).Label(label).Datasource(ds).
		Query(dashboard.StringOrMap{Map: map[string]any{"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"}}).
		Definition(query).Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")},
			Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}})
}

func base(uid, title, desc string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).Uid(uid).Description(desc).Tags([]string{"peloton"}).
		Refresh("30s").Time("now-6h", "now").Timezone("browser").Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Editable().WithVariable(datasourceVar())
}

// PartitionHealth is the partition-health dashboard: hosts per partition
// and zone, usage, services' P99 against their SLO, moves,
// oversubscription, revocable capacity and QoS kills.
func PartitionHealth() *dashboard.DashboardBuilder {
	const sel = `partition=~"$partition"`
	hostPart := `* on (instance, host) group_left (partition) peloton_host_partition{` + sel + `}`
	return base("peloton-partition-health", "Peloton / Partition health",
		"Hosts, usage and latency per partition, the host advisor's moves and oversubscription, and revocable work.").
		WithVariable(labelVar("partition", "partition", "peloton_host_partition")).
		WithRow(dashboard.NewRowBuilder("Hosts")).
		WithPanel(stacked("Hosts per partition and zone", "Hosts of each partition by zone, as the advisor last classified them (unknown: no fresh report).", "short", 12,
			q{`sum by (partition, zone) (peloton_partition_hosts{` + sel + `})`, "{{partition}} {{zone}}"})).
		WithPanel(stacked("Hosts by state", "Hosts by maintenance state.", "short", 6,
			q{`sum by (state) (peloton_hosts)`, "{{state}}"})).
		WithPanel(single("Hosts moving", "Hosts between partitions now (draining, or drained and waiting for the backend).", "short", 3,
			q{`sum(peloton_hosts_moving)`, ""})).
		WithPanel(single("Stale host agents", "Hosts in service whose agent has not reported for over 60 s: they give no slack and no latency readings.", "short", 3,
			q{`count((time() - (peloton_host_usage_report_timestamp_seconds ` + hostPart + `)) > 60 and on (instance, host) peloton_host_up == 1) or vector(0)`, ""})).
		WithRow(dashboard.NewRowBuilder("Usage and latency")).
		WithPanel(series("CPU used per partition", "CPU in use on the partition's hosts, as their agents last reported.", "short", 8,
			q{`sum by (partition) (peloton_host_cpu_used_cores ` + hostPart + `)`, "{{partition}} cores"}).AxisLabel("cores")).
		WithPanel(series("Memory used per partition", "Memory in use on the partition's hosts, as their agents last reported.", "bytes", 8,
			q{`sum by (partition) (peloton_host_memory_used_bytes ` + hostPart + `)`, "{{partition}}"})).
		WithPanel(series("Partition pressure", "The larger of the share of the partition's hosts orange or red and the share of its services over their SLO; the advisor moves hosts when it stays high.", "percentunit", 8,
			q{`peloton_partition_pressure{` + sel + `}`, "{{partition}}"}).Min(0).Max(1)).
		WithPanel(series("Service P99 vs SLO", "Each latency-sensitive service's P99 (the worst of its instances) and its SLO.", "s", 24,
			q{`peloton_service_latency_p99_seconds{` + sel + `}`, "{{service}} P99"},
			q{`peloton_service_latency_slo_seconds{` + sel + `}`, "{{service}} SLO"})).
		WithRow(dashboard.NewRowBuilder("Moves and oversubscription")).
		WithPanel(series("Host move steps", "Steps of host moves between partitions (apply-failed: the backend refused the new partition; retried).", "short", 8,
			q{`sum by (step) (increase(peloton_host_partition_moves_total[$__rate_interval]))`, "{{step}}"})).
		WithPanel(series("Advisor moves", "Moves the host advisor decided (observe: only logged and shown), and its failed rounds.", "short", 8,
			q{`sum by (from, to, mode) (increase(peloton_advisor_moves_total[$__rate_interval]))`, "{{from}} → {{to}} ({{mode}})"},
			q{`sum(increase(peloton_advisor_rounds_total{outcome="error"}[$__rate_interval]))`, "failed rounds"})).
		WithPanel(series("Oversubscription factor", "Mean oversubscription factor of each partition's hosts (1: none).", "short", 8,
			q{`peloton_partition_oversubscription_factor{` + sel + `}`, "{{partition}}"}).Min(1)).
		WithRow(dashboard.NewRowBuilder("Revocable work")).
		WithPanel(series("Revocable CPU", "What revocable work may hold (the hosts' slack, oversubscription included) and what it holds.", "short", 8,
			q{`sum(peloton_revocable_capacity{kind="cpu"})`, "capacity"},
			q{`sum(peloton_revocable_allocated{kind="cpu"})`, "allocated"}).AxisLabel("cores")).
		WithPanel(series("Revocable memory", "What revocable work may hold and what it holds.", "bytes", 8,
			q{`sum(peloton_revocable_capacity{kind="memory"})`, "capacity"},
			q{`sum(peloton_revocable_allocated{kind="memory"})`, "allocated"})).
		WithPanel(series("QoS kills", "Revocable runs killed by their host's QoS control because the host ran hot.", "short", 8,
			q{`sum by (host) (increase(peloton_host_qos_kills_total[$__rate_interval]))`, "{{host}}"}))
}

// Scheduling is the scheduling dashboard: queues, admission and placement
// latency, placements, preemptions, API latency, store writes, and the
// federation.
func Scheduling() *dashboard.DashboardBuilder {
	p99 := func(metric, by string) string {
		return fmt.Sprintf(`histogram_quantile(0.99, sum by (le%s) (rate(%s_bucket[$__rate_interval])))`, by, metric)
	}
	p50 := func(metric string) string {
		return fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (rate(%s_bucket[$__rate_interval])))`, metric)
	}
	const cl = `cluster=~"$cluster"`
	return base("peloton-scheduling", "Peloton / Scheduling",
		"Queues, admission and placement latency, placements and preemptions, the API and the store, and the federation.").
		WithVariable(labelVar("cluster", "cluster", "peloton_federation_cluster_state")).
		WithRow(dashboard.NewRowBuilder("Queues and placement")).
		WithPanel(series("Queue depth", "Tasks waiting: pending (not admitted), ready (admitted, not placed), placed (not launched).", "short", 8,
			q{`sum by (queue) (peloton_queue_depth)`, "{{queue}}"})).
		WithPanel(series("Admission latency", "Time a gang waited in its pool's queue before admission.", "s", 8,
			q{p50("peloton_admission_latency_seconds"), "p50"},
			q{p99("peloton_admission_latency_seconds", ""), "p99"})).
		WithPanel(series("Placement round latency", "Duration of one placement round.", "s", 8,
			q{p50("peloton_placement_round_seconds"), "p50"},
			q{p99("peloton_placement_round_seconds", ""), "p99"})).
		WithPanel(series("Placements", "Tasks placed, gangs returned unplaced (retried) and unresolvable (can never fit as asked).", "ops", 8,
			q{`sum by (result) (rate(peloton_placements_total[$__rate_interval]))`, "{{result}}"})).
		WithPanel(series("Preemptions", "Tasks chosen for preemption, by reason.", "ops", 8,
			q{`sum by (reason) (rate(peloton_preemptions_total[$__rate_interval]))`, "{{reason}}"})).
		WithPanel(series("Update restarts", "Instances an update or restart started again, by how.", "ops", 8,
			q{`sum by (how) (rate(peloton_update_restarts_total[$__rate_interval]))`, "{{how}}"})).
		WithPanel(stacked("Tasks by state", "Task instances by state.", "short", 24,
			q{`sum by (state) (peloton_tasks)`, "{{state}}"})).
		WithRow(dashboard.NewRowBuilder("API and store")).
		WithPanel(series("API latency by method (p99)", "99th percentile of each API method's latency.", "s", 12,
			q{p99("peloton_api_request_seconds", ", method"), "{{method}}"})).
		WithPanel(series("API errors by method and code", "Requests answered with another code than OK.", "reqps", 12,
			q{`sum by (method, code) (rate(peloton_api_request_seconds_count{code!="OK"}[$__rate_interval]))`, "{{method}} {{code}}"})).
		WithPanel(series("Store writes", "Records written to etcd, by kind.", "wps", 12,
			q{`sum by (kind) (rate(peloton_store_writes_total[$__rate_interval]))`, "{{kind}}"})).
		WithPanel(series("Unwritten task events", "Task events whose write to etcd failed and that wait to be written again.", "short", 12,
			q{`sum(peloton_jobmgr_unwritten_events)`, "waiting"})).
		WithRow(dashboard.NewRowBuilder("Federation")).
		WithPanel(series("Cluster state", "The state each cluster is in (1).", "short", 8,
			q{`peloton_federation_cluster_state{` + cl + `} == 1`, "{{cluster}} {{state}}"})).
		WithPanel(series("SLA requests", "Disruption requests to the global SLA evaluator, by answer.", "reqps", 8,
			q{`sum by (answer) (rate(peloton_federation_sla_requests_total[$__rate_interval]))`, "{{answer}}"})).
		WithPanel(series("SLA grant latency (p99)", "From a disruption request to its grant recorded.", "s", 8,
			q{p99("peloton_federation_sla_grant_seconds", ""), "p99"})).
		WithPanel(series("Pool propagation (p99)", "From a change of a global pool to a cluster's pool holding its part.", "s", 8,
			q{p99("peloton_federation_pool_propagation_seconds", ""), "p99"})).
		WithPanel(series("Pool repairs", "Cluster pools set back after a change made in the cluster.", "short", 8,
			q{`sum by (cluster) (increase(peloton_federation_pool_repairs_total{` + cl + `}[$__rate_interval]))`, "{{cluster}}"})).
		WithPanel(series("Federated jobs and services", "Federated batch jobs by step and federated service events.", "short", 8,
			q{`sum by (step) (increase(peloton_federation_jobs_total[$__rate_interval]))`, "jobs {{step}}"},
			q{`sum by (event) (increase(peloton_federation_services_total[$__rate_interval]))`, "services {{event}}"}))
}

// Files are the dashboards by file name, as JSON.
func Files() (map[string][]byte, error) {
	out := map[string][]byte{}
	for name, b := range map[string]*dashboard.DashboardBuilder{
		"partition-health.json": PartitionHealth(),
		"scheduling.json":       Scheduling(),
	} {
		d, err := b.Build()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		// Panel ids are unique within a dashboard; Grafana links to a
		// panel by its id, so they follow the order of the panels.
		for i := range d.Panels {
			id := uint32(i + 1)
			if p := d.Panels[i].Panel; p != nil {
				p.Id = &id
			}
			if r := d.Panels[i].RowPanel; r != nil {
				r.Id = id
			}
		}
		data, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = append(data, '\n')
	}
	return out, nil
}
