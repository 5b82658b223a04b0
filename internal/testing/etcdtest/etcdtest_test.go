package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClusterSurvivesItsLeader: a 3-member cluster serves; with its leader
// killed the others elect a new one and serve; the killed member comes
// back on its data; a paused single server answers nothing until resumed.
func TestClusterSurvivesItsLeader(t *testing.T) {
	c := Start(t, 3)
	put := func(key string) error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second})
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = cli.Put(ctx, key, "v")
		return err
	}
	if err := put("a"); err != nil {
		t.Fatal(err)
	}
	l := c.Leader()
	if l < 0 {
		t.Fatal("no leader")
	}
	c.Members[l].Kill()
	c.WaitReady(30 * time.Second)
	if err := put("b"); err != nil {
		t.Fatalf("write after the leader was killed: %v", err)
	}
	if err := c.Members[l].Restart(); err != nil {
		t.Fatal(err)
	}
	c.WaitReady(30 * time.Second)

	one := Start(t, 1)
	one.Members[0].Pause()
	if err := one.probe(); err == nil {
		t.Fatal("a paused server answered")
	}
	one.Members[0].Resume()
	one.WaitReady(30 * time.Second)
}
