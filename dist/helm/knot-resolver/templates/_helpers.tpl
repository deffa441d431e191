{{/* The objects' name: the release's, with the chart's name unless it already has it. */}}
{{- define "knot-resolver.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "knot-resolver.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "knot-resolver.labels" -}}
{{ include "knot-resolver.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "knot-resolver.secretName" -}}
{{- .Values.api.existingSecret | default (printf "%s-api" (include "knot-resolver.fullname" .)) -}}
{{- end -}}

{{- define "knot-resolver.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The configuration: the user's, with the paths and the API the chart's pod needs. */}}
{{- define "knot-resolver.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "rundir" "/run/knot-resolver" -}}
{{- $cache := get $config "cache" | default dict -}}
{{- $_ := set $cache "storage" "/var/cache/knot-resolver" -}}
{{- $_ := set $config "cache" $cache -}}
{{- $_ := set $config "management" (dict "interface" (printf "0.0.0.0@%d" (int .Values.api.port))) -}}
{{- toYaml $config -}}
{{- end -}}

{{/* Refuse an API Service reachable from outside the cluster in clear text, and a
ServiceMonitor with no API Service to select. */}}
{{- define "knot-resolver.checkApiExposure" -}}
{{- $svc := .Values.api.service -}}
{{- if and $svc.enabled (ne $svc.type "ClusterIP") (not $svc.tlsTerminatedInFront) -}}
{{- fail (printf "api.service.type=%s would expose the management API (bearer tokens, the configuration, the status page /ui) outside the cluster in clear text: keep api.service.type=ClusterIP, or terminate TLS in front of it and set api.service.tlsTerminatedInFront=true" $svc.type) -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled (not $svc.enabled) -}}
{{- fail "serviceMonitor.enabled needs api.service.enabled=true: the ServiceMonitor scrapes the API Service's pods" -}}
{{- end -}}
{{- end -}}
