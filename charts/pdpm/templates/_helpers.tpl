{{/* The name prefix of the release's objects. */}}
{{- define "pdpm.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object of the chart. */}}
{{- define "pdpm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/part-of: pdpm
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Labels of the operator's Deployment and pods. */}}
{{- define "pdpm.operatorLabels" -}}
{{ include "pdpm.labels" . }}
app.kubernetes.io/name: pdpm-operator
{{- end -}}

{{/* Labels that select the operator's pods. */}}
{{- define "pdpm.operatorSelector" -}}
app.kubernetes.io/name: pdpm-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pdpm.operatorName" -}}
{{- printf "%s-operator" (include "pdpm.fullname" .) -}}
{{- end -}}

{{/* image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "pdpm.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
