package cli

import (
	"context"
	"time"

	"github.com/spf13/pflag"

	"github.com/peloton-sched/peloton/bench"
	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr/mesos"
)

// mesosFlags configure the mesos backend.
type mesosFlags struct {
	master          string
	contentType     string
	role            string
	principal       string
	frameworkName   string
	failoverTimeout time.Duration
}

func (m *mesosFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&m.master, "mesos-master", "", "URL of the Mesos master, http://HOST:5050 (mesos backend; required with it)")
	fs.StringVar(&m.contentType, "mesos-content-type", mesos.ContentTypeProtobuf, `encoding of the v1 scheduler API: "protobuf" or "json" (mesos backend)`)
	fs.StringVar(&m.role, "mesos-role", mesos.DefaultRole, "Mesos role the framework subscribes with (mesos backend)")
	fs.StringVar(&m.principal, "mesos-principal", "", "Mesos principal of the framework (mesos backend; empty: none)")
	fs.StringVar(&m.frameworkName, "mesos-framework-name", mesos.DefaultFrameworkName, "name of the framework in Mesos (mesos backend)")
	fs.DurationVar(&m.failoverTimeout, "mesos-failover-timeout", mesos.DefaultFailoverTimeout, "how long Mesos keeps the framework's tasks while no stack is subscribed; a restarted or standby stack subscribes with the framework ID kept in etcd within it (mesos backend)")
}

// config checks the mesos backend's flags (only with --backend mesos).
func (m *mesosFlags) config(backend string) (cluster.MesosConfig, error) {
	if backend != mesos.BackendName {
		if m.master != "" {
			return cluster.MesosConfig{}, usageErrorf("invalid --mesos-master: only the mesos backend uses it (use --backend mesos)")
		}
		return cluster.MesosConfig{}, nil
	}
	if m.failoverTimeout <= 0 {
		return cluster.MesosConfig{}, usageErrorf("invalid --mesos-failover-timeout %s: must be > 0 (Mesos would end the framework's tasks as soon as the stack disconnects)", m.failoverTimeout)
	}
	if m.frameworkName == "" {
		return cluster.MesosConfig{}, usageErrorf("invalid --mesos-framework-name: must not be empty")
	}
	cfg := cluster.MesosConfig{Master: m.master, ContentType: m.contentType, Role: m.role, Principal: m.principal,
		FrameworkName: m.frameworkName, FailoverTimeout: m.failoverTimeout}
	if err := (mesos.Config{Master: cfg.Master, ContentType: cfg.ContentType, Role: cfg.Role,
		FailoverTimeout: cfg.FailoverTimeout}).Check(); err != nil {
		return cluster.MesosConfig{}, usageErrorf("invalid %v", err)
	}
	return cfg, nil
}

// mesosBenchFlags registers the flags of `peloton bench mesos`.
func mesosBenchFlags(fs *pflag.FlagSet) (func() error, func(context.Context, bench.Env) (*bench.Result, error)) {
	c := bench.DefaultMesosConfig()
	fs.IntVar(&c.Agents, "agents", c.Agents, "agents of the test master")
	fs.Float64Var(&c.AgentCPU, "agent-cpu", c.AgentCPU, "CPUs of each agent")
	fs.Float64Var(&c.AgentMemMB, "agent-memory-mb", c.AgentMemMB, "memory of each agent in MiB")
	fs.IntVar(&c.Tasks, "tasks", c.Tasks, "runs launched in each phase (0.1 CPU, 32 MiB each)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "launches in flight at once")
	fs.IntVar(&c.StackTasks, "stack-tasks", c.StackTasks, "runs submitted through the whole stack in each stack phase")
	fs.IntVar(&c.StackJobSize, "stack-job-size", c.StackJobSize, "runs per job in the stack phases")
	fs.StringVar(&c.ContentType, "mesos-content-type", c.ContentType, `encoding of the v1 scheduler API: "protobuf" or "json"`)
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Mesos(ctx, env, c) }
}
