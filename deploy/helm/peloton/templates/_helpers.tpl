{{/* The chart's name, or nameOverride. */}}
{{- define "peloton.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The name of the release's objects: fullnameOverride, else the release's
name when it already holds the chart's name (release "peloton" gives
"peloton", as deploy/kubernetes names them), else release-chart.
*/}}
{{- define "peloton.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "peloton.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; the component's are added where it has one. */}}
{{- define "peloton.labels" -}}
app.kubernetes.io/name: {{ include "peloton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* What a component's selector matches: call with (list . "component"). */}}
{{- define "peloton.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "peloton.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The image of every container. */}}
{{- define "peloton.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* --kube-namespace: kube.namespace, else the release's namespace. */}}
{{- define "peloton.kubeNamespace" -}}
{{- default .Release.Namespace .Values.kube.namespace -}}
{{- end -}}

{{/* --kube-pool-namespaces as the flag takes it: /pool=namespace,... */}}
{{- define "peloton.poolNamespaces" -}}
{{- $entries := list -}}
{{- range .Values.kube.poolNamespaces -}}
{{- $entries = append $entries (printf "%s=%s" .pool .namespace) -}}
{{- end -}}
{{- join "," $entries -}}
{{- end -}}

{{/*
Every namespace Peloton's pods may go to (kube.namespace and those of
kube.poolNamespaces), sorted and without repeats, one per line.
*/}}
{{- define "peloton.taskNamespaces" -}}
{{- $all := list (include "peloton.kubeNamespace" .) -}}
{{- range .Values.kube.poolNamespaces -}}
{{- $all = append $all .namespace -}}
{{- end -}}
{{- $all | uniq | sortAlpha | join "\n" -}}
{{- end -}}

{{/*
The federation the cluster registers with: federationAddress, else this
release's federation when it is on, else none.
*/}}
{{- define "peloton.federationAddress" -}}
{{- if .Values.controlPlane.federationAddress -}}
{{- .Values.controlPlane.federationAddress -}}
{{- else if .Values.federation.enabled -}}
{{- printf "%s-federation.$(POD_NAMESPACE).svc:5392" (include "peloton.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets of a pod spec, when there are any. */}}
{{- define "peloton.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end -}}
{{- end -}}
