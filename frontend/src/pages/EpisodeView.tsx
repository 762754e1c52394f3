/**
 * A multi-turn episode of the sample browser: the conversation (the opening, the policy's turns with their tool
 * calls, the tool results and the environment's replies) and the response's tokens cut into what the policy
 * generated (trained) and what the environment added (context, never trained). A gateway episode's policy turns are
 * the agent's recorded chat calls, each with its trained tokens, the context tokens before it and its policy version.
 */
import { formatNumber } from "../components/ui";
import { policyShare, toolResultName, type Episode, type EpisodeMessage } from "../lib/episode";

export function EpisodeView({ episode }: { episode: Episode }) {
  const share = policyShare(episode);
  return (
    <div className="episode" data-testid="episode">
      <div className="stat-row" data-testid="episode-stats">
        <span><b>{episode.turns}</b> {episode.gateway ? "agent call" : "policy turn"}{episode.turns === 1 ? "" : "s"}</span>
        <span>ended: <b>{episode.end ?? "?"}</b></span>
        <span>policy tokens <b>{episode.trainedTokens}</b> (trained)</span>
        <span>{episode.gateway ? "tool / prompt" : "environment"} tokens <b>{episode.contextTokens}</b> (context)</span>
        {share !== null ? <span>policy share <b>{(share * 100).toFixed(0)}%</b></span> : null}
      </div>
      <ol className="conversation" data-testid="conversation">
        {episode.messages.map((message, index) => (
          <Turn key={index} message={message} gateway={episode.gateway} toolName={message.role === "tool" ? toolResultName(episode.messages, index) : null} />
        ))}
      </ol>
      {episode.segments.length ? <Segments episode={episode} /> : null}
    </div>
  );
}

function roleLabel(message: EpisodeMessage, toolName: string | null, gateway: boolean): string {
  if (message.policyTurn !== null) return gateway ? `policy · call ${message.policyTurn}` : `policy · turn ${message.policyTurn}`;
  if (message.role === "tool") return `tool result${toolName ? ` · ${toolName}` : ""}`;
  return message.role;
}

function Turn({ message, toolName, gateway }: { message: EpisodeMessage; toolName: string | null; gateway: boolean }) {
  const kind = message.policyTurn !== null ? "policy" : message.role;
  return (
    <li className={`turn turn-${kind}`} data-testid={`turn-${kind}`}>
      <div className="turn-head">
        <b>{roleLabel(message, toolName, gateway)}</b>
        {message.tokens !== null ? (
          <span className="muted" data-testid="turn-tokens">
            {message.tokens} tokens trained{message.contextBefore ? ` · ${message.contextBefore} context tokens before it` : ""}
          </span>
        ) : null}
        {message.version !== null ? <span className="muted" data-testid="turn-version">policy v{message.version}</span> : null}
        {message.stepReward !== null ? <span className="muted">step reward {formatNumber(message.stepReward, 3)}</span> : null}
      </div>
      {message.content ? <pre className="mono turn-text">{message.content}</pre> : null}
      {message.toolCalls.map((call) => (
        <div key={call.id} className="tool-call" data-testid="tool-call">
          <span className="muted">calls</span> <code>{call.name}({call.arguments})</code>
        </div>
      ))}
      {message.toolCallErrors.map((err, i) => <div key={i} className="bad">malformed tool call: {err}</div>)}
    </li>
  );
}

/** The response as the trainer saw it: policy tokens (trained) and environment / tool tokens (context) apart. */
function Segments({ episode }: { episode: Episode }) {
  return (
    <div className="segments" data-testid="segments">
      <div className="muted">Tokens after the opening: <span className="seg-trained">policy (trained)</span>{" "}
        <span className="seg-context">environment / tools (context)</span></div>
      <pre className="mono segment-text">
        {episode.segments.map((segment) => (
          <span key={segment.start} className={segment.trained ? "seg-trained" : "seg-context"} data-trained={segment.trained}
            title={`tokens ${segment.start}–${segment.end} · ${segment.trained ? "policy (trained)" : "environment (context)"}`}>
            {segment.text}
          </span>
        ))}
      </pre>
    </div>
  );
}
