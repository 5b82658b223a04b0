package metrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// vectors names every vector of this package as the code calls it, so that
// the scan below knows which of them have a fixed label. A vector missing
// here fails the test: decide whether its label is fixed (add it to Fixed)
// or data, then list it.
var vectors = map[string]*prometheus.MetricVec{
	"JobsByState": JobsByState.MetricVec, "TasksByState": TasksByState.MetricVec,
	"TaskTransitions": TaskTransitions.MetricVec, "QueueDepth": QueueDepth.MetricVec,
	"Placements": Placements.MetricVec, "PoolResources": PoolResources.MetricVec,
	"APILatency": APILatency.MetricVec, "Hosts": Hosts.MetricVec, "StoreWrites": StoreWrites.MetricVec,
	"Preemptions": Preemptions.MetricVec, "Restarts": Restarts.MetricVec, "HostMoves": HostMoves.MetricVec,
	"Reconciled": Reconciled.MetricVec, "ReservationIdle": ReservationIdle.MetricVec,
	"FederationClusterState": FederationClusterState.MetricVec, "FederationClusterTransitions": FederationClusterTransitions.MetricVec,
	"FederationPoolRepairs": FederationPoolRepairs.MetricVec, "FederationJobs": FederationJobs.MetricVec,
	"FederationServices": FederationServices.MetricVec, "FederationSLA": FederationSLA.MetricVec,
	"HostCPUUsed": HostCPUUsed.MetricVec, "HostMemoryUsed": HostMemoryUsed.MetricVec,
	"HostReportTime": HostReportTime.MetricVec, "HostReports": HostReports.MetricVec,
	"HostQoSKills": HostQoSKills.MetricVec, "HostSlackCPU": HostSlackCPU.MetricVec, "HostSlackMemory": HostSlackMemory.MetricVec,
	"PartitionHosts": PartitionHosts.MetricVec, "PartitionPressure": PartitionPressure.MetricVec,
	"PartitionOversubscription": PartitionOversubscription.MetricVec, "HostZone": HostZone.MetricVec,
	"HostOversubscription": HostOversubscription.MetricVec, "AdvisorMoves": AdvisorMoves.MetricVec,
	"AdvisorRounds": AdvisorRounds.MetricVec, "ServiceLatencyP99": ServiceLatencyP99.MetricVec,
	"ServiceLatencySLO": ServiceLatencySLO.MetricVec, "RevocableCapacity": RevocableCapacity.MetricVec,
	"RevocableAllocated": RevocableAllocated.MetricVec, "HostPartition": HostPartition.MetricVec,
	"HostUp": HostUp.MetricVec,
	// The cluster's name: data, not a fixed label.
	"StoreDBBytes": StoreDBBytes.MetricVec, "StoreDBInUseBytes": StoreDBInUseBytes.MetricVec, "StoreQuotaBytes": StoreQuotaBytes.MetricVec,
}

// indirect are the call sites whose label value is not a constant
// expression, with the constants it comes from (package.Name, resolved in
// the tree like any other constant).
var indirect = map[string][]string{
	"resmgr/manager.go Preemptions v.Reason": {"resmgr.ReasonReclaim", "resmgr.ReasonPriority", "resmgr.ReasonReservation"},
	// Checked against the enum by hostmgr's TestHostStatesAreFixedLabels.
	"hostmgr/maintenance.go Hosts st.String": {`"HOST_UP"`, `"HOST_DRAINING"`, `"HOST_DRAINED"`, `"HOST_DOWN"`},
}

func fixedOf(v *prometheus.MetricVec) *FixedLabel {
	for i := range Fixed {
		if Fixed[i].Vec == v {
			return &Fixed[i]
		}
	}
	return nil
}

// TestFixedLabelsStartAtZero: every value of every fixed label has its
// series from the start, at 0 unless a test of this package moved it.
func TestFixedLabelsStartAtZero(t *testing.T) {
	for _, f := range Fixed {
		ch := make(chan prometheus.Metric, 64)
		go func() { f.Vec.Collect(ch); close(ch) }()
		got := map[string]bool{}
		var desc string
		for m := range ch {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			desc = m.Desc().String()
			for _, lp := range pb.Label {
				if lp.GetName() != f.Label {
					t.Errorf("%s: label %q, want only %q", desc, lp.GetName(), f.Label)
				}
				got[lp.GetValue()] = true
			}
		}
		for _, v := range f.Values {
			if !got[v] {
				t.Errorf("%s{%s=%q} has no series at start (%s)", f.Label, f.Label, v, desc)
			}
		}
	}
}

// TestLabelValuesInUseAreFixed reads every metrics.X.WithLabelValues call
// in the tree and checks that each value a fixed label is given is one of
// its listed values (a new or misspelt value would be a series that did
// not start at 0), and that every vector called is known here.
func TestLabelValuesInUseAreFixed(t *testing.T) {
	root := filepath.Join("..", "..")
	pkgs := parseTree(t, root)
	calls := 0
	for dir, files := range pkgs {
		for path, f := range files {
			rel, _ := filepath.Rel(root, path)
			imports := importsOf(f)
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "WithLabelValues" {
					return true
				}
				inner, ok := sel.X.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if pkg, ok := inner.X.(*ast.Ident); !ok || imports[pkg.Name] != "internal/metrics" {
					return true
				}
				calls++
				vec, ok := vectors[inner.Sel.Name]
				if !ok {
					t.Errorf("%s: metrics.%s is not listed in vectors in labels_test.go", rel, inner.Sel.Name)
					return true
				}
				fl := fixedOf(vec)
				if fl == nil {
					return true
				}
				if len(call.Args) != 1 {
					t.Errorf("%s: metrics.%s takes one label, called with %d", rel, inner.Sel.Name, len(call.Args))
					return true
				}
				expr := exprString(call.Args[0])
				vals, ok := eval(pkgs, root, dir, imports, call.Args[0])
				if !ok {
					srcs, listed := indirect[filepath.ToSlash(rel)+" "+inner.Sel.Name+" "+expr]
					if !listed {
						t.Errorf("%s: metrics.%s.WithLabelValues(%s): not a constant; list where its values come from in indirect", rel, inner.Sel.Name, expr)
						return true
					}
					vals = nil
					for _, s := range srcs {
						e, err := parser.ParseExpr(s)
						if err != nil {
							t.Fatal(err)
						}
						pkg, _, _ := strings.Cut(s, ".")
						v, ok := eval(pkgs, root, dir, map[string]string{pkg: pkg}, e)
						if !ok {
							t.Errorf("%s: %s is not a constant of the tree", rel, s)
						}
						vals = append(vals, v...)
					}
				}
				for _, v := range vals {
					if !slices.Contains(fl.Values, v) {
						t.Errorf("%s: metrics.%s{%s=%q}: not among its fixed values %v (add it to Fixed, or fix the spelling)", rel, inner.Sel.Name, fl.Label, v, fl.Values)
					}
				}
				return true
			})
		}
	}
	if calls < 40 {
		t.Fatalf("found only %d WithLabelValues calls in the tree; the scan is broken", calls)
	}
}

// parseTree parses every non-test Go file of the module, by directory
// relative to root.
func parseTree(t *testing.T, root string) map[string]map[string]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	pkgs := map[string]map[string]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "proto", "ui", "node_modules", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		dir = filepath.ToSlash(dir)
		if pkgs[dir] == nil {
			pkgs[dir] = map[string]*ast.File{}
		}
		pkgs[dir][path] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// importsOf maps a file's import names to their directory in the module
// ("" for packages outside it).
func importsOf(f *ast.File) map[string]string {
	const module = "github.com/peloton-sched/peloton/"
	m := map[string]string{}
	for _, is := range f.Imports {
		p, _ := strconv.Unquote(is.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if is.Name != nil {
			name = is.Name.Name
		}
		m[name] = strings.TrimPrefix(p, module)
		if !strings.HasPrefix(p, module) {
			m[name] = ""
		}
	}
	return m
}

// eval gives the string values e may have: a literal, a constant of the
// package in dir or of an imported package of the module, their sums, and
// an index into a composite map literal (all its values). ok is false for
// anything else.
func eval(pkgs map[string]map[string]*ast.File, root, dir string, imports map[string]string, e ast.Expr) ([]string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return nil, false
		}
		s, err := strconv.Unquote(e.Value)
		return []string{s}, err == nil
	case *ast.ParenExpr:
		return eval(pkgs, root, dir, imports, e.X)
	case *ast.Ident:
		return constant(pkgs, root, dir, e.Name)
	case *ast.SelectorExpr:
		pkg, ok := e.X.(*ast.Ident)
		if !ok || imports[pkg.Name] == "" {
			return nil, false
		}
		return constant(pkgs, root, imports[pkg.Name], e.Sel.Name)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return nil, false
		}
		xs, ok1 := eval(pkgs, root, dir, imports, e.X)
		ys, ok2 := eval(pkgs, root, dir, imports, e.Y)
		if !ok1 || !ok2 {
			return nil, false
		}
		var out []string
		for _, x := range xs {
			for _, y := range ys {
				out = append(out, x+y)
			}
		}
		return out, true
	case *ast.IndexExpr:
		lit, ok := e.X.(*ast.CompositeLit)
		if !ok {
			return nil, false
		}
		var out []string
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				return nil, false
			}
			vs, ok := eval(pkgs, root, dir, imports, kv.Value)
			if !ok {
				return nil, false
			}
			out = append(out, vs...)
		}
		return out, true
	}
	return nil, false
}

// constant finds the string constant name declared in the package in dir.
func constant(pkgs map[string]map[string]*ast.File, root, dir, name string) ([]string, bool) {
	for _, f := range pkgs[dir] {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name == name && i < len(vs.Values) {
						return eval(pkgs, root, dir, importsOf(f), vs.Values[i])
					}
				}
			}
		}
	}
	return nil, false
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.BasicLit:
		return e.Value
	case *ast.CallExpr:
		return exprString(e.Fun)
	}
	return "<expr>"
}
