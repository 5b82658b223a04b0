// Package history owns the archive of finished jobs: the Store interface
// the job manager writes a finished job to before it leaves etcd and reads
// an archived job from, the record one archived job is (its spec versions,
// final status, updates and every instance's final run with its
// transitions, encoded compactly), and two implementations: Bolt, a bbolt
// file in the data dir for `peloton up`, and Postgres, one PostgreSQL
// database shared by many clusters and the federation, whose schema
// Peloton creates and migrates itself.
//
// History is not state: etcd holds what must be acted on, this package what
// happened. A record is written once, when its job is archived, and read by
// id or listed with the filters `peloton job list` has; nothing here
// changes a job, so nothing here needs the job manager's locks or its
// transition tables. Every record is keyed by cluster name and job id.
//
// The package knows the public API's messages and nothing of the
// components that produce them: it must not import jobmgr, resmgr,
// hostmgr, placement, cluster or federation (a test enforces it). The
// caller renders an archived job as its reads answer a live one (GetJob,
// ListJobs, ListJobVersions, ListTasks, GetTask); Job holds all they need.
package history
