package bench

import (
	"slices"
	"strings"
	"testing"
)

func TestKubernetesPhasesAndFigures(t *testing.T) {
	cfg := DefaultKubernetesConfig()
	cfg.QPS = []float32{200, 12.5}
	got := kubernetesPhases(cfg)
	want := []string{"raw", "kubeSchedulerDefault",
		"kubeSchedulerQps200", "pelotonBindingQps200", "pelotonNodeNameQps200",
		"kubeSchedulerQps12p5", "pelotonBindingQps12p5", "pelotonNodeNameQps12p5"}
	if !slices.Equal(got, want) {
		t.Fatalf("phases %q, want %q", got, want)
	}
	figs := kubernetesFiguresOf(cfg)
	for _, f := range []string{"rawBoundPerSec", "pelotonNodeNameQps12p5StartupMsP99", "pelotonBindingQps200VsKubeSchedulerEqualQps", "pelotonNodeNameQps200FirstPodMs",
		"pelotonBindingQps12p5CpuPelotonMsPerPod", "pelotonNodeNameQps200CpuVsKubeScheduler"} {
		if !slices.Contains(figs, f) {
			t.Errorf("figures lack %s: %q", f, figs)
		}
	}
	if len(figs) != len(want)*len(kubePhaseSuffixes)+4*len(pelotonSuffixes) {
		t.Errorf("%d figures: %q", len(figs), figs)
	}
}

func TestKubernetesValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		edit func(*KubernetesConfig)
		flag string
	}{
		{func(c *KubernetesConfig) { c.QPS = nil }, "--qps"},
		{func(c *KubernetesConfig) { c.QPS = []float32{200, 0} }, "--qps"},
		{func(c *KubernetesConfig) { c.QPS = []float32{200, 200} }, "--qps"},
		{func(c *KubernetesConfig) { c.BindModes = nil }, "--bind-modes"},
		{func(c *KubernetesConfig) { c.BindModes = []string{"binding", "binding"} }, "--bind-modes"},
		{func(c *KubernetesConfig) { c.BindModes = []string{"nodeName"} }, "--bind-modes"},
		{func(c *KubernetesConfig) { c.KwokPodWorkers = -1 }, "--kwok-pod-workers"},
	} {
		c := DefaultKubernetesConfig()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag) {
			t.Errorf("config %+v: err %v, want one starting with %s", c, err, tc.flag)
		}
	}
	c := DefaultKubernetesConfig()
	if err := c.Validate(); err != nil {
		t.Errorf("the default config is invalid: %v", err)
	}
}
