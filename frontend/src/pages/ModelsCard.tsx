/** Registered models of the team (what the submit form offers) and registering one by server-side path. */
import { useState, type FormEvent } from "react";
import { api, unwrap } from "../api/client";
import { Card, ErrorBanner, formatTime } from "../components/ui";
import { useApiQuery } from "../lib/queries";

export function ModelsCard({ canWrite }: { canWrite: boolean }) {
  const models = useApiQuery(["models"], () => unwrap(api.GET("/api/v1/models")));
  const [name, setName] = useState("");
  const [path, setPath] = useState("");
  const [error, setError] = useState<unknown>(null);

  const register = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    try {
      await unwrap(api.POST("/api/v1/models", { body: { name, path } }));
      setName("");
      setPath("");
      await models.reload();
    } catch (err) {
      setError(err);
    }
  };

  return (
    <Card title="Models">
      <ErrorBanner error={error ?? models.error} />
      <table className="table compact" data-testid="models">
        <thead>
          <tr><th>Name</th><th>Path</th><th>Registered</th></tr>
        </thead>
        <tbody>
          {models.data?.data.map((m) => (
            <tr key={m.id}>
              <td>{m.name}</td>
              <td><code>{m.path}</code></td>
              <td>{formatTime(m.created_at)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {canWrite ? (
        <form className="row inline-form" onSubmit={register}>
          <input placeholder="model name" value={name} onChange={(e) => setName(e.target.value)} required />
          <input placeholder="path on the server (under the artifact dir)" value={path} onChange={(e) => setPath(e.target.value)} required />
          <button type="submit">Register model</button>
        </form>
      ) : null}
    </Card>
  );
}
