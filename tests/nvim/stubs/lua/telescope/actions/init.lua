local select_default = {}
function select_default:replace(fn)
  self.fn = fn
end
return { select_default = select_default, close = function() end }
