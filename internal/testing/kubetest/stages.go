package kubetest

// Annotations that drive the life of a pod on a kwok node. A pod without
// them runs the tiny command language the sim backend also understands,
// read from its first container's command and args (a "sh -c X" wrapper is
// unwrapped):
//
//	sleep S   runs S (seconds, or a Go duration such as 1.5s), then succeeds
//	true      succeeds at once
//	false     fails at once with exit code 1
//	exit N    ends at once with exit code N
//
// Anything else runs until the pod is deleted, like a service. A running
// pod is Ready, unless its readiness probe is the command "false". A
// running pod whose container image is changed (patched in place) has its
// container restarted with the new image at once, as the kubelet does
// whatever the pod's restartPolicy: the container's restartCount rises by
// one and it runs again, from now.
const (
	// AnnotationSimDuration is how long the pod runs before it ends
	// (a Go duration, "2s"); it overrides the command.
	AnnotationSimDuration = "peloton.io/sim-duration"
	// AnnotationSimExitCode is the exit code it ends with ("0" when only a
	// duration is given); it overrides the command.
	AnnotationSimExitCode = "peloton.io/sim-exit-code"
	// AnnotationHoldStatus on a node keeps kwok from touching its status, so
	// that a test can mark it NotReady; on a pod it keeps kwok from
	// restarting its container after an image change, so that a test can
	// play that part of the kubelet itself.
	AnnotationHoldStatus = "peloton.io/sim-hold-status"
	// AnnotationKwokNode marks the nodes this harness's kwok manages.
	AnnotationKwokNode = "kwok.x-k8s.io/node"
)

// jqArgv is a jq definition of the pod's argv, a shell wrapper unwrapped.
const jqArgv = `def argv: ((.spec.containers[0].command // []) + (.spec.containers[0].args // [])) ` +
	`| if length >= 3 and .[1] == "-c" and ((.[0] | sub(".*/"; "")) as $s | $s == "sh" or $s == "bash") ` +
	`then (.[2] | [splits(" +")] | map(select(. != ""))) else . end; ` +
	`def word: argv | (.[0] // "") | sub(".*/"; "");`

// jqExitCode is the exit code the pod will end with, or null if it runs
// until deleted.
const jqExitCode = jqArgv + ` .metadata.annotations["` + AnnotationSimExitCode + `"] ` +
	`// (if .metadata.annotations["` + AnnotationSimDuration + `"] then "0" else null end) ` +
	`// (word as $w | if $w == "sleep" or $w == "true" then "0" elif $w == "false" then "1" ` +
	`elif $w == "exit" then (argv | .[1] // "1") else null end)`

// jqDuration is how long the pod runs before it ends.
const jqDuration = jqArgv + ` .metadata.annotations["` + AnnotationSimDuration + `"] ` +
	`// (if word == "sleep" then (argv | .[1] // "0" | if test("^[0-9.]+$") then . + "s" else . end) else "0s" end)`

// tmplExitCode sets $code to the same exit code as jqExitCode, in Go
// template (the language of kwok's status templates), for pods that fail.
// It is one line so that it can sit inside a YAML block.
const tmplExitCode = `{{- $a := .metadata.annotations | default dict -}}` +
	`{{- $c := index .spec.containers 0 -}}` +
	`{{- $argv := concat ($c.command | default list) ($c.args | default list) -}}` +
	`{{- if and (ge (len $argv) 3) (eq (index $argv 1) "-c") -}}{{- $argv = compact (splitList " " (index $argv 2)) -}}{{- end -}}` +
	`{{- $w := "" -}}{{- if $argv -}}{{- $w = base (index $argv 0) -}}{{- end -}}` +
	`{{- $code = index $a "` + AnnotationSimExitCode + `" | default "" -}}` +
	`{{- if not $code -}}` +
	`{{- if and (eq $w "exit") (ge (len $argv) 2) -}}{{- $code = index $argv 1 -}}{{- else -}}{{- $code = "1" -}}{{- end -}}` +
	`{{- end -}}`

// jqImageChanged is "changed" when a pod's containers' images (by name)
// are not those its container statuses report. Such a pod is restarted
// before anything else happens to it: the stages that end a pod want
// "same", so that kwok, which picks at random among the stages that
// match, has only the restart to pick.
const jqImageChanged = `if ([.spec.containers[] | .name + "=" + .image] | sort) != ` +
	`([(.status.containerStatuses // [])[] | .name + "=" + .image] | sort) then "changed" else "same" end`

// stagesYAML is the kwok configuration: the stages that make a node Ready,
// run a bound pod, restart a running pod's container whose image changed,
// end it as its command or annotations say, and remove a deleted pod at
// once (there is no kubelet to wait for).
const stagesYAML = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: peloton-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.annotations["` + AnnotationHoldStatus + `"]'
      operator: DoesNotExist
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Ready
        status: "True"
        reason: KubeletReady
        message: kwok node
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: peloton-pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Pending"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $ready := "True" }}
      {{ with (index .spec.containers 0).readinessProbe }}{{ with .exec }}{{ if eq (index .command 0) "false" }}{{ $ready = "False" }}{{ end }}{{ end }}{{ end }}
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: {{ $ready | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: {{ $ready | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: {{ eq $ready "True" }}
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: peloton-pod-restart-changed
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.metadata.annotations["` + AnnotationHoldStatus + `"]'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '.status.containerStatuses'
      operator: Exists
    - key: '` + jqImageChanged + `'
      operator: In
      values: ["changed"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $ready := "True" }}
      {{ with (index .spec.containers 0).readinessProbe }}{{ with .exec }}{{ if eq (index .command 0) "false" }}{{ $ready = "False" }}{{ end }}{{ end }}{{ end }}
      {{ $restarts := dict }}
      {{ range .status.containerStatuses }}{{ $_ := set $restarts .name .restartCount }}{{ end }}
      conditions:
      - type: Ready
        status: {{ $ready | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: {{ $ready | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: {{ eq $ready "True" }}
        started: true
        restartCount: {{ add1 (index $restarts .name | default 0) }}
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: peloton-pod-succeed
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '` + jqImageChanged + `'
      operator: In
      values: ["same"]
    - key: '` + jqExitCode + `'
      operator: In
      values: ["0"]
  delay:
    durationMilliseconds: 0
    durationFrom:
      jq:
        expression: '` + jqDuration + `'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Ready
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            reason: Completed
            finishedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: peloton-pod-fail
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '` + jqImageChanged + `'
      operator: In
      values: ["same"]
    - key: '` + jqExitCode + `'
      operator: Exists
    - key: '` + jqExitCode + `'
      operator: NotIn
      values: ["0"]
  delay:
    durationMilliseconds: 0
    durationFrom:
      jq:
        expression: '` + jqDuration + `'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := "1" }}
      ` + tmplExitCode + `
      conditions:
      - type: Ready
        status: "False"
        reason: PodFailed
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "False"
        reason: PodFailed
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: {{ $code }}
            reason: Error
            finishedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: peloton-pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
  next:
    delete: true
`
