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

{{/* The CSI driver's name: the CSIDriver object's and the provisioner's. */}}
{{- define "pdpm.csiDriverName" -}}
pdfs.csi.pdpm.io
{{- end -}}

{{- define "pdpm.csiControllerName" -}}
{{- printf "%s-csi-controller" (include "pdpm.fullname" .) -}}
{{- end -}}

{{- define "pdpm.csiNodeName" -}}
{{- printf "%s-csi-node" (include "pdpm.fullname" .) -}}
{{- end -}}

{{- define "pdpm.csiMounterName" -}}
{{- printf "%s-csi-mounter" (include "pdpm.fullname" .) -}}
{{- end -}}

{{/* The unix socket the node plugin reaches the mounter on (on the node). */}}
{{- define "pdpm.csiMounterSocketDir" -}}
{{- printf "%s/mounter" (trimSuffix "/" .Values.csi.node.stateDir) -}}
{{- end -}}

{{/* Labels of a CSI component's objects; .component: controller, node or mounter. */}}
{{- define "pdpm.csiLabels" -}}
{{ include "pdpm.labels" .root }}
app.kubernetes.io/name: pdpm-csi
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels that select a CSI component's pods. */}}
{{- define "pdpm.csiSelector" -}}
app.kubernetes.io/name: pdpm-csi
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A container's securityContext when it needs no privilege at all. */}}
{{- define "pdpm.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
