/** Register one split of a Hugging Face dataset (POST /datasets/hub) and follow it until it is ready or failed. */
import { useState } from "react";
import { api, ApiError, unwrap } from "../api/client";
import type { Dataset } from "../api/types";
import { Field } from "../components/ui";

const POLL_MS = 1000;

export function DatasetFromHub({ onReady }: { onReady: (dataset: Dataset) => void }) {
  const [hubId, setHubId] = useState("");
  const [split, setSplit] = useState("train");
  const [revision, setRevision] = useState("main");
  const [name, setName] = useState("");
  const [error, setError] = useState<string | undefined>();
  const [status, setStatus] = useState<string | undefined>();
  const [busy, setBusy] = useState(false);

  const register = async () => {
    setBusy(true);
    setError(undefined);
    setStatus(undefined);
    try {
      let dataset = await unwrap(
        api.POST("/api/v1/datasets/hub", {
          body: { name: name || `${hubId.split("/").pop()}-${split}`, hub_id: hubId, split, revision },
        }),
      );
      while (dataset.state === "downloading") {
        setStatus(`importing ${hubId} [${split}]…`);
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
        dataset = await unwrap(api.GET("/api/v1/datasets/{dataset_id}", { params: { path: { dataset_id: dataset.id } } }));
      }
      if (dataset.state === "failed") {
        setStatus(undefined);
        setError(dataset.error ?? "the import failed");
      } else {
        setStatus(`imported ${dataset.name}: ${dataset.row_count} rows`);
      }
      onReady(dataset); // the list shows it either way (a failed one with its state)
    } catch (caught) {
      const lines = caught instanceof ApiError ? Object.values(caught.fields) : [];
      setError(lines.length ? lines.join("; ") : caught instanceof Error ? caught.message : String(caught));
    } finally {
      setBusy(false);
    }
  };

  return (
    <div className="upload" data-testid="dataset-from-hub">
      <Field label="…or from the Hugging Face Hub (dataset id and split)" error={error} hint={status}>
        <input name="dataset_hub_id" placeholder="owner/name" value={hubId} onChange={(e) => setHubId(e.target.value)} />
      </Field>
      <div className="row">
        <input name="dataset_hub_split" placeholder="split" value={split} onChange={(e) => setSplit(e.target.value)} />
        <input name="dataset_hub_revision" placeholder="revision" value={revision} onChange={(e) => setRevision(e.target.value)} />
        <input name="dataset_hub_name" placeholder="dataset name (default: name-split)" value={name} onChange={(e) => setName(e.target.value)} />
        <button type="button" onClick={register} disabled={!hubId || !split || busy}>
          {busy ? "Importing…" : "Register"}
        </button>
      </div>
    </div>
  );
}
