/**
 * A dataset as a model sees it: pick a dataset and a ready model; the first rows are shown rendered with the model's
 * chat template (the exact prompt text the engine gets) and every row's prompt length in that model's tokens is
 * drawn as a histogram (GET /datasets/{id}/preview).
 */
import { useMemo, useState } from "react";
import { api, unwrap } from "../api/client";
import { BarChart } from "../components/BarChart";
import { Card, ErrorBanner } from "../components/ui";
import { useApiQuery } from "../lib/queries";
import { newestVersions } from "../lib/modelVersions";

type Preview = Awaited<ReturnType<typeof loadPreview>>;

function loadPreview(datasetId: number, model: string) {
  return unwrap(
    api.GET("/api/v1/datasets/{dataset_id}/preview", { params: { path: { dataset_id: datasetId }, query: { model, limit: 3 } } }),
  );
}

export function DatasetPreviewCard() {
  const datasets = useApiQuery(["datasets"], () => unwrap(api.GET("/api/v1/datasets")));
  const models = useApiQuery(["models"], () => unwrap(api.GET("/api/v1/models")));
  const [datasetId, setDatasetId] = useState<number | null>(null);
  const [model, setModel] = useState("");
  const [preview, setPreview] = useState<Preview | null>(null);
  const [error, setError] = useState<unknown>(null);
  const ready = newestVersions(models.data?.data.filter((m) => m.state === "ready") ?? []);

  const show = async () => {
    if (datasetId === null || !model) return;
    setError(null);
    try {
      setPreview(await loadPreview(datasetId, model));
    } catch (err) {
      setPreview(null);
      setError(err);
    }
  };
  const bins = preview?.prompt_tokens.bins ?? [];
  const categories = useMemo(() => bins.map((b) => `${Math.round(b.lo)}`), [bins]);
  const series = useMemo(() => [{ label: "prompts", color: "#60a5fa", values: bins.map((b) => b.count) }], [bins]);

  return (
    <Card title="Dataset preview">
      <ErrorBanner error={error ?? datasets.error ?? models.error} />
      <div className="row inline-form">
        <select name="preview_dataset" value={datasetId ?? ""} onChange={(e) => setDatasetId(e.target.value ? Number(e.target.value) : null)}>
          <option value="">dataset…</option>
          {datasets.data?.data.map((d) => (
            <option key={d.id} value={d.id}>{d.name} ({d.row_count} rows)</option>
          ))}
        </select>
        <select name="preview_model" value={model} onChange={(e) => setModel(e.target.value)}>
          <option value="">model (its chat template and tokens)…</option>
          {ready.map((m) => (
            <option key={m.id} value={m.name}>{m.name}</option>
          ))}
        </select>
        <button type="button" onClick={show} disabled={datasetId === null || !model}>Preview</button>
      </div>
      {preview ? (
        <div data-testid="dataset-preview">
          <p className="muted">
            chat template: {preview.chat_template ? "yes" : "no"} · prompt tokens p50 {preview.prompt_tokens.p50} · p90{" "}
            {preview.prompt_tokens.p90} · max {preview.prompt_tokens.max} ({preview.prompt_tokens.count} rows)
          </p>
          {preview.rows.map((row, i) => (
            <div key={i} className="preview-row">
              <div className="muted">{row.tokens} tokens{Object.keys(row.meta).length ? ` · meta ${JSON.stringify(row.meta)}` : ""}</div>
              <pre data-testid="preview-text">{row.text}</pre>
            </div>
          ))}
          <BarChart categories={categories} series={series} xLabel="prompt length (model tokens)" yLabel="rows" height={160} />
        </div>
      ) : null}
    </Card>
  );
}
