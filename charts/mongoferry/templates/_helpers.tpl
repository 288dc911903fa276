{{/*
The release's full name: the release name, with the chart's name appended
unless the release name already holds it; at most 63 characters.
*/}}
{{- define "mongoferry.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "mongoferry.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mongoferry
{{- end -}}

{{/* Labels that select the manager's pods. */}}
{{- define "mongoferry.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{/* The manager's ServiceAccount. */}}
{{- define "mongoferry.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "mongoferry.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name the manager's ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The manager's image: repository, then @digest or :tag (appVersion by default). */}}
{{- define "mongoferry.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
mongoferry.requireMonitoringAPI fails the rendering when the cluster does
not serve monitoring.coreos.com/v1. Argument: the name of the value that
asked for the object.
*/}}
{{- define "mongoferry.requireMonitoringAPI" -}}
{{- $ctx := index . 0 -}}
{{- $what := index . 1 -}}
{{- if not ($ctx.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}
{{- fail (printf "%s is true, but the cluster has no monitoring.coreos.com/v1 API: install the prometheus-operator CRDs (ServiceMonitor, PodMonitor, PrometheusRule) first, or set %s=false (with helm template, pass --api-versions monitoring.coreos.com/v1)" $what $what) -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the workers can be in, as a PodMonitor namespaceSelector. */}}
{{- define "mongoferry.workerNamespaceSelector" -}}
{{- if .Values.watchNamespaces }}
matchNames:
{{- range .Values.watchNamespaces }}
  - {{ . | quote }}
{{- end }}
{{- else }}
any: true
{{- end }}
{{- end -}}

{{/*
The Secret holding the workers' CA (workers.tls.caSecretName, else
<fullname>-worker-ca).
*/}}
{{- define "mongoferry.workerCASecret" -}}
{{- default (printf "%s-worker-ca" (include "mongoferry.fullname" .)) .Values.workers.tls.caSecretName -}}
{{- end }}
