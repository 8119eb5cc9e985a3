{{/*
Names, labels and shared fragments of the labgate chart.
*/}}

{{/* The chart name (or nameOverride). */}}
{{- define "labgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name prefix of every object: fullnameOverride, the release name, or release-chart. */}}
{{- define "labgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart-version, as the helm.sh/chart label wants it. */}}
{{- define "labgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The one source of labels: app.kubernetes.io/* for every object.
Call with a dict: (dict "context" $ "component" "webhook").
*/}}
{{- define "labgate.labels" -}}
{{- $ := .context -}}
helm.sh/chart: {{ include "labgate.chart" $ }}
{{ include "labgate.selectorLabels" . }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: labgate
app.kubernetes.io/managed-by: {{ $.Release.Service }}
{{- with $.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels that select a component's pods (a subset of labgate.labels; never change on upgrade). */}}
{{- define "labgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "labgate.name" .context }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Object names per component. */}}
{{- define "labgate.webhookName" -}}
{{- printf "%s-webhook" (include "labgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "labgate.reconcilerName" -}}
{{- printf "%s-reconciler" (include "labgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "labgate.auditName" -}}
{{- printf "%s-audit" (include "labgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "labgate.policiesName" -}}
{{- printf "%s-policies" (include "labgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "labgate.preDeleteName" -}}
{{- printf "%s-pre-delete" (include "labgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{/* Both webhook configurations carry this name (as webhook/registration.py names them). */}}
{{- define "labgate.webhookConfigurationName" -}}
{{- include "labgate.fullname" . }}
{{- end }}
{{- define "labgate.tlsSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "labgate.fullname" .)) .Values.certificates.secretName }}
{{- end }}
{{- define "labgate.clientCAName" -}}
{{- default (printf "%s-apiserver-client-ca" (include "labgate.fullname" .)) .Values.webhook.clientAuth.configMapName }}
{{- end }}
{{- define "labgate.servingCertificateName" -}}
{{- printf "%s-webhook" (include "labgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* image reference from an image block (repository, tag, digest); the digest wins. */}}
{{- define "labgate.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .defaultTag .image.tag) }}
{{- end }}
{{- end }}

{{/*
Namespaces the webhooks never intercept: kube-system and the release namespace always, then the
values' extras. Sorted and unique, exactly like webhook.registration.exempt_namespace_selector.
*/}}
{{- define "labgate.exemptNamespaces" -}}
{{- concat (list "kube-system" .Release.Namespace) .Values.webhook.exemptNamespaces | uniq | sortAlpha | toJson }}
{{- end }}

{{/*
The policy files the OPA sidecar loads, one path (relative to policies/) per line: what
`opa run --ignore=*_test.rego --ignore=samples --ignore=testdata policies/` loads (Rego modules and
JSON/YAML data), from the chart's policies/ symlink to the repository's policies/.
*/}}
{{- define "labgate.policyFiles" -}}
{{- range $path, $_ := .Files.Glob "policies/**" }}
{{- $relative := trimPrefix "policies/" $path }}
{{- $isLoaded := or (hasSuffix ".rego" $path) (hasSuffix ".json" $path) (hasSuffix ".yaml" $path) (hasSuffix ".yml" $path) }}
{{- $isSkipped := or (hasSuffix "_test.rego" $path) (regexMatch "(^|/)(samples|testdata)/" $relative) }}
{{- if and $isLoaded (not $isSkipped) }}
{{ $relative }}
{{- end }}
{{- end }}
{{- end }}

{{/* The ConfigMap key of a policy file: its path with "/" as "." (keys may not hold "/"). */}}
{{- define "labgate.policyKey" -}}
{{- . | replace "/" "." }}
{{- end }}

{{/* Refuse combinations of values that the schema cannot express. */}}
{{- define "labgate.validate" -}}
{{- if ge (float64 .Values.webhook.admissionDeadlineSeconds) (float64 .Values.webhook.timeoutSeconds) }}
{{- fail (printf "webhook.admissionDeadlineSeconds (%v) must be below webhook.timeoutSeconds (%v): labgate must answer before the apiserver gives up" .Values.webhook.admissionDeadlineSeconds .Values.webhook.timeoutSeconds) }}
{{- end }}
{{- if ge (float64 .Values.webhook.maxAdmissionWaitSeconds) (float64 .Values.webhook.admissionDeadlineSeconds) }}
{{- fail (printf "webhook.maxAdmissionWaitSeconds (%v) must be below webhook.admissionDeadlineSeconds (%v): the wait for a slot is part of the deadline" .Values.webhook.maxAdmissionWaitSeconds .Values.webhook.admissionDeadlineSeconds) }}
{{- end }}
{{- if gt (float64 .Values.webhook.opaTimeoutSeconds) (float64 .Values.webhook.admissionDeadlineSeconds) }}
{{- fail (printf "webhook.opaTimeoutSeconds (%v) must not exceed webhook.admissionDeadlineSeconds (%v)" .Values.webhook.opaTimeoutSeconds .Values.webhook.admissionDeadlineSeconds) }}
{{- end }}
{{- if and .Values.certificates.caBundle (eq .Values.certificates.mode "cert-manager") }}
{{- fail "certificates.caBundle is for a certificate managed outside labgate and cert-manager; in mode cert-manager the cainjector fills it" }}
{{- end }}
{{- if and .Values.kueue.podIntegration (not .Values.kueue.enabled) }}
{{- fail "kueue.podIntegration needs kueue.enabled: without Kueue nothing removes the gate the policies would put on GPU pods" }}
{{- end }}
{{- if eq (int .Values.opa.diagnosticPort) (int .Values.webhook.port) }}
{{- fail "opa.diagnosticPort and webhook.port must differ" }}
{{- end }}
{{- if has (int .Values.webhook.healthPort) (list (int .Values.webhook.port) (int .Values.opa.diagnosticPort)) }}
{{- fail "webhook.healthPort must differ from webhook.port and opa.diagnosticPort" }}
{{- end }}
{{- if and .Values.webhook.clientAuth.required (not (or .Values.webhook.clientAuth.caBundle .Values.webhook.clientAuth.configMapName)) }}
{{- fail "webhook.clientAuth.required: give the CA of the apiserver's webhook client certificate (webhook.clientAuth.caBundle or .configMapName; docs/operations.md, 'Authenticating the apiserver'), or set webhook.clientAuth.required=false where the apiserver cannot present one" }}
{{- end }}
{{- if and .Values.webhook.networkPolicy.enabled (not .Values.webhook.networkPolicy.apiserverCIDRs) }}
{{- fail "webhook.networkPolicy.apiserverCIDRs: give the addresses the apiserver calls the webhook from (the control-plane nodes), or set webhook.networkPolicy.enabled=false" }}
{{- end }}
{{- end }}

{{/*
Webhook rules (labgate.workloadRules) are generated from webhook/registration.py into _generated.tpl
(`labgate generate`). Leases, Events and Nodes are never listed: intercepting them could stall leader
election or nodes.
*/}}

{{/*
The namespaceSelector of the webhooks for objects in namespaces: tenant namespaces only (labelled
labgate.io/tenant), never the exempt ones (see labgate.exemptNamespaces). An outage of labgate then
touches tenants and nothing else. Same as webhook.registration.exempt_namespace_selector.
*/}}
{{- define "labgate.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "labgate.exemptNamespaces" . }}
    - key: {{ include "labgate.tenantLabel" . }}
      operator: Exists
{{- end }}

{{/*
The same for one of the two namespaced mutating webhooks: call with (dict "context" $ "operator" "In")
for the namespaces whose tenant refuses GPU pods beyond quota (labelled labgate.io/gpu-over-quota=refuse
by the reconciler), "NotIn" for every other tenant namespace. Same as
webhook.registration.exempt_namespace_selector with over_quota.
*/}}
{{- define "labgate.overQuotaNamespaceSelector" -}}
{{- include "labgate.namespaceSelector" .context }}
    - key: {{ include "labgate.overQuotaLabel" .context }}
      operator: {{ .operator }}
      values: ["refuse"]
{{- end }}

{{/*
The namespaceSelector and matchConditions of the webhooks for cluster-scoped objects (Namespaces,
Tenants): a Namespace request reaches labgate when the namespace carries a tenant label (before or
after), or when someone other than the platform asks about a namespace that did not opt out
(labgate.io/ignore). The CEL text is generated from webhook.registration.namespace_match_expression
(_generated.tpl).
*/}}
{{- define "labgate.clusterScope" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "labgate.exemptNamespaces" . }}
matchConditions:
  - name: tenant-namespaces-and-tenants
    expression: {{ include "labgate.namespaceMatchExpression" . }}
{{- end }}

{{/* clientConfig of a webhook: the Service, and a caBundle only when values give one (see values.yaml). */}}
{{- define "labgate.clientConfig" -}}
{{- $ := .context -}}
clientConfig:
  service:
    name: {{ include "labgate.webhookName" $ }}
    namespace: {{ $.Release.Namespace }}
    path: {{ .path }}
    port: 443
  {{- with $.Values.certificates.caBundle }}
  caBundle: {{ . }}
  {{- end }}
{{- end }}

{{/* Annotations of both webhook configurations: in mode cert-manager, the cainjector fills caBundle. */}}
{{- define "labgate.webhookConfigurationAnnotations" -}}
{{- if eq .Values.certificates.mode "cert-manager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "labgate.servingCertificateName" .) }}
{{- end }}
{{- end }}

{{/* The restricted Pod Security profile for every container of the chart. */}}
{{- define "labgate.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities:
    drop: [ALL]
  seccompProfile:
    type: RuntimeDefault
{{- end }}
