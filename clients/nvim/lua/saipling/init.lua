---@mod saipling Semantic search over markdown projects, through the saipling language server.
local config = require("saipling.config")

local M = {}

M.name = "saipling"
local group = vim.api.nvim_create_augroup("saipling", { clear = true })

--- Show a message from the plugin.
---@param msg string
---@param level? integer
local function notify(msg, level)
  vim.notify("saipling: " .. msg, level or vim.log.levels.INFO, { title = "saipling" })
end
M.notify = notify

--- Project root for a file: nearest ancestor holding a root marker, else the file's directory.
---@param fname string absolute path
---@return string
function M.root_dir(fname)
  local root = vim.fs.root(fname, config.options.root_markers)
  return root or vim.fs.dirname(fname)
end

--- Start the server for `bufnr` (or attach it to the running one for the same root).
---@param bufnr integer
---@return integer? client_id
function M.start(bufnr)
  local opts = config.options
  if vim.bo[bufnr].buftype ~= "" then
    return nil
  end
  local fname = vim.api.nvim_buf_get_name(bufnr)
  if fname == "" then
    return nil
  end
  fname = vim.fs.normalize(vim.fn.fnamemodify(fname, ":p"))
  if vim.fn.executable(opts.cmd[1]) ~= 1 then
    if not M._warned_missing then
      M._warned_missing = true
      notify(("server command %q not found; see :checkhealth saipling"):format(opts.cmd[1]), vim.log.levels.ERROR)
    end
    return nil
  end
  local root = M.root_dir(fname)
  local init_options = vim.tbl_deep_extend("force", opts.init_options or {}, opts.settings or {})
  local ok, id = pcall(vim.lsp.start, {
    name = M.name,
    cmd = opts.cmd,
    cmd_env = opts.cmd_env,
    root_dir = root,
    -- nil rather than {}: an empty Lua table is encoded as a JSON array
    init_options = not vim.tbl_isempty(init_options) and init_options or nil,
    settings = not vim.tbl_isempty(opts.settings or {}) and { saipling = opts.settings } or nil,
    on_attach = opts.on_attach,
  }, { bufnr = bufnr })
  if not ok then
    notify("could not start the server: " .. tostring(id), vim.log.levels.ERROR)
    return nil
  end
  return id
end

--- The saipling client for a buffer, else any running saipling client.
---@param bufnr? integer
---@return vim.lsp.Client?
function M.get_client(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local clients = vim.lsp.get_clients({ name = M.name, bufnr = bufnr })
  if #clients == 0 then
    clients = vim.lsp.get_clients({ name = M.name })
  end
  return clients[1]
end

--- Send a request through the saipling client; `cb(result)` runs only on success.
--- Errors (no client, server error) are shown with vim.notify.
---@param method string
---@param params table
---@param cb? fun(result: any, client: vim.lsp.Client)
---@param bufnr? integer
---@return boolean sent
function M.request(method, params, cb, bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local client = M.get_client(bufnr)
  if not client then
    notify("no server running; open a markdown file in a project (see :checkhealth saipling)", vim.log.levels.WARN)
    return false
  end
  local function handler(err, result)
    if err then
      notify(("%s failed: %s"):format(method, err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    if result == vim.NIL then
      result = nil
    end
    if cb then
      local ok, cb_err = pcall(cb, result, client)
      if not ok then
        notify(("%s: %s"):format(method, tostring(cb_err)), vim.log.levels.ERROR)
      end
    end
  end
  local req_bufnr = vim.api.nvim_buf_is_loaded(bufnr) and bufnr or nil
  local ok, sent
  if vim.fn.has("nvim-0.11") == 1 then
    ok, sent = pcall(client.request, client, method, params, handler, req_bufnr)
  else
    ok, sent = pcall(client.request, method, params, handler, req_bufnr)
  end
  if not ok or not sent then
    notify(("%s could not be sent: %s"):format(method, ok and "client is not running" or tostring(sent)),
      vim.log.levels.ERROR)
    return false
  end
  return true
end

--- Search the project; without `query`, ask for one. Opens the chosen result at its line.
---@param query? string
function M.search(query)
  local picker = require("saipling.picker")
  local function run(q)
    if not q or vim.trim(q) == "" then
      return
    end
    local params = { query = q, maxResults = config.options.max_results, source = "editor", mode = config.options.mode }
    M.request("saipling/search", params, function(result, client)
      local results = result and result.results or {}
      -- Degraded (e.g. keyword-only) or still indexing: say so in the picker title.
      local notes = {}
      if result and type(result.degraded) == "string" and result.degraded ~= "" then
        notes[#notes + 1] = result.degraded
      end
      if result and result.indexing == true then
        notes[#notes + 1] = "indexing, results may be incomplete"
      end
      local title = "Saipling: " .. q .. (#notes > 0 and (" (" .. table.concat(notes, "; ") .. ")") or "")
      picker.pick(results, { title = title, root = client.root_dir })
    end)
  end
  if query and vim.trim(query) ~= "" then
    run(query)
  else
    vim.ui.input({ prompt = "Saipling search: " }, run)
  end
end

--- Passages from other files most similar to the current file.
function M.related()
  local bufnr = vim.api.nvim_get_current_buf()
  local fname = vim.api.nvim_buf_get_name(bufnr)
  if fname == "" then
    notify("the current buffer has no file", vim.log.levels.WARN)
    return
  end
  local params = { uri = vim.uri_from_bufnr(bufnr), maxResults = config.options.max_results }
  M.request("saipling/related", params, function(result, client)
    require("saipling.picker").pick(result and result.results or {}, {
      title = "Saipling related: " .. vim.fn.fnamemodify(fname, ":t"),
      root = client.root_dir,
    })
  end, bufnr)
end

--- Reindex the project in the background (`full` rebuilds from scratch).
---@param full? boolean
function M.reindex(full)
  M.request("saipling/reindex", { full = full or false }, function()
    notify(full and "full reindex started" or "reindex started")
  end)
end

--- A JSON value, with null (vim.NIL) and "" as nil.
local function val(x)
  if x == vim.NIL or x == "" then
    return nil
  end
  return x
end

--- Format a `saipling/status` result as lines.
---@param s table
---@return string[]
function M.format_status(s)
  local model = val(s.model) and (" (" .. s.model .. ")") or ""
  local reason = val(s.providerReason) and (" - " .. s.providerReason) or ""
  local lines = {
    ("root:     %s"):format(val(s.root) or "?"),
    ("files:    %s   chunks: %s"):format(val(s.totalFiles) or 0, val(s.totalChunks) or 0),
    ("indexed:  %s"):format(val(s.lastIndexed) or "never"),
    ("provider: %s%s%s"):format(val(s.provider) or "?", model, reason),
  }
  if s.isIndexing == true then
    local p = type(s.progress) == "table" and s.progress or {}
    lines[#lines + 1] = ("indexing: %s/%s %s"):format(
      val(p.filesProcessed) or "?",
      val(p.filesTotal) or "?",
      val(p.currentFile) or ""
    )
  end
  local pending = val(s.pendingFiles)
  if pending and pending ~= 0 then
    lines[#lines + 1] = ("pending:  %s"):format(type(pending) == "table" and #pending or tostring(pending))
  end
  if val(s.degraded) then
    lines[#lines + 1] = ("degraded: %s"):format(tostring(s.degraded))
  end
  for _, w in ipairs(type(s.warnings) == "table" and s.warnings or {}) do
    lines[#lines + 1] = "warning:  " .. tostring(w)
  end
  return lines
end

--- Show the index status; with `cb`, pass the raw result to it instead.
---@param cb? fun(status: table)
function M.status(cb)
  M.request("saipling/status", vim.empty_dict(), function(result)
    if cb then
      cb(result)
    else
      notify("status\n" .. table.concat(M.format_status(result or {}), "\n"))
    end
  end)
end

--- Drop the whole index (rebuilt by the next reindex).
function M.clear_index()
  M.request("saipling/clearIndex", vim.empty_dict(), function()
    notify("index cleared")
  end)
end

--- Echo `$/progress` of the saipling client in the message area.
---@param ev table LspProgress autocmd event
local function on_progress(ev)
  local client = vim.lsp.get_client_by_id(ev.data.client_id)
  if not client or client.name ~= M.name then
    return
  end
  local value = ev.data.params and ev.data.params.value or {}
  local msg
  if value.kind == "end" then
    msg = "saipling: " .. (value.message or "indexing done")
  else
    msg = ("saipling: %s%s%s"):format(
      value.title or "Indexing",
      value.message and (" " .. value.message) or "",
      value.percentage and (" (%d%%)"):format(value.percentage) or ""
    )
  end
  vim.api.nvim_echo({ { msg } }, false, {})
end

--- Configure the plugin and start the server for matching buffers.
---@param opts? saipling.Config
function M.setup(opts)
  config.setup(opts)
  M._warned_missing = false
  vim.api.nvim_clear_autocmds({ group = group })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = config.options.filetypes,
    callback = function(ev)
      M.start(ev.buf)
    end,
  })
  if config.options.progress then
    vim.api.nvim_create_autocmd("LspProgress", { group = group, callback = on_progress })
  end
  -- Buffers already open when setup() runs (lazy loading on ft=markdown).
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.tbl_contains(config.options.filetypes, vim.bo[buf].filetype) then
      M.start(buf)
    end
  end
  M._setup_done = true
end

return M
